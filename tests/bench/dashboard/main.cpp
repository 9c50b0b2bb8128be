// Feeds N workers' telemetry at F frames/s into the real dashboard widget
// and measures each refresh that paints (pulling new telemetry into the
// plots and painting as many as fit in a frame), how often each plot is
// painted, and the process's resident memory. Prints one JSON object.
#include <dashboard.h>
#include <report_qcp.h>

#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTimer>
#include <QtTest/QTest>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

using namespace dlion;

namespace {

double rssMb()
{
    QFile f(QStringLiteral("/proc/self/status"));
    if (!f.open(QIODevice::ReadOnly))
        return -1;
    for (const QByteArray &line : f.readAll().split('\n')) {
        if (line.startsWith("VmRSS:"))
            return line.mid(6).trimmed().split(' ').first().toDouble() / 1024.0;
    }
    return -1;
}

double percentile(std::vector<double> v, double p)
{
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, std::size_t(std::ceil(p * double(v.size()))) - (p > 0 ? 1 : 0))];
}

// One frame: a round from every worker; an evaluation every 25 frames and
// a merge every 250, like a DLion run with a 0.5 s evaluation interval.
protocol::TelemetryBatch makeFrame(int workers, qint64 frame, double t, std::mt19937 &rng)
{
    std::uniform_real_distribution<double> jitter(0.9, 1.1);
    protocol::TelemetryBatch b;
    for (int w = 0; w < workers; ++w) {
        protocol::RoundRecord r;
        r.worker = w;
        r.round = frame;
        r.t = t;
        r.rate = 2000.0 / (1 + w % 4) * jitter(rng);
        r.share = 1.0 / workers * jitter(rng);
        r.batch = int(32 * r.share * workers);
        r.loss = 2.3 * std::exp(-t / 20.0) * jitter(rng);
        r.slowdown = 1 + w % 4;
        r.linkMbps.resize(std::size_t(workers));
        r.linkFraction.resize(std::size_t(workers));
        for (int j = 0; j < workers; ++j) {
            r.linkMbps[std::size_t(j)] = j == w ? 0 : 40.0 / (1 + (w + j) % 3) * jitter(rng);
            r.linkFraction[std::size_t(j)] = j == w ? 0 : std::min(1.0, 0.3 / (1 + (w + j) % 3) * jitter(rng));
        }
        b.rounds.append(r);
        if (frame % 25 == 0) {
            protocol::EvalRecord e;
            e.worker = w;
            e.round = frame;
            e.t = t;
            e.accuracy = std::min(0.95, 0.1 + t / 60.0) * jitter(rng);
            e.globalAccuracy = e.accuracy;
            e.primary = w == 0;
            b.evals.append(e);
        }
    }
    if (frame % 250 == 0 && frame > 0)
        b.merges.append({frame, t, 0, 1, 0.5, 0.7, 0.5, false});
    return b;
}

} // namespace

int main(int argc, char *argv[])
{
    QApplication app(argc, argv);
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Dashboard replot benchmark; prints JSON."));
    parser.addHelpOption();
    parser.addOption({"workers", "Workers (default 32).", "N", "32"});
    parser.addOption({"fps", "Telemetry frames per second (default 50).", "F", "50"});
    parser.addOption({"seconds", "Duration (default 20).", "S", "20"});
    parser.addOption({"refresh", "Dashboard refresh rate in Hz (default 30).", "HZ", "30"});
    parser.addOption({"frame-budget", "What a refresh may spend painting, in ms (default: the dashboard's; "
                                      "a large value paints every changed plot on every refresh).", "MS"});
    parser.addOption({"screenshot", "Save the dashboard as it ends to FILE (PNG), to look at.", "FILE"});
    parser.process(app);
    const int workers = qMax(1, parser.value("workers").toInt());
    const int fps = qMax(1, parser.value("fps").toInt());
    const double seconds = qMax(0.5, parser.value("seconds").toDouble());
    const int hz = qMax(1, parser.value("refresh").toInt());

    ui::Dashboard dashboard;
    dashboard.setRefreshRate(0);  // the benchmark drives and times refresh() itself
    if (parser.isSet("frame-budget"))
        dashboard.setFrameBudget(parser.value("frame-budget").toDouble());
    dashboard.resize(1600, 900);
    dashboard.show();
    if (!QTest::qWaitForWindowExposed(&dashboard))
        return 1;
    dashboard.reset(workers, QList<QList<double>>(workers, QList<double>(workers, 40)));
    const double rssStart = rssMb();

    std::mt19937 rng(1);
    QElapsedTimer clock;
    clock.start();
    qint64 frames = 0;
    QTimer feed;
    feed.setTimerType(Qt::PreciseTimer);
    QObject::connect(&feed, &QTimer::timeout, [&] {
        // Catch up if the event loop was late, so the rate holds.
        while (frames < qint64(clock.elapsed() / 1000.0 * fps)) {
            dashboard.model().append(makeFrame(workers, frames, double(frames) / fps, rng));
            ++frames;
        }
    });
    std::vector<double> replotMs;
    qint64 plotPaints = 0;
    QTimer refresh;
    refresh.setTimerType(Qt::PreciseTimer);
    QObject::connect(&refresh, &QTimer::timeout, [&] {
        QElapsedTimer t;
        t.start();
        if (const int painted = dashboard.refresh(); painted > 0) {
            replotMs.push_back(double(t.nsecsElapsed()) / 1e6);
            plotPaints += painted;
        }
    });
    feed.start(1000 / fps);
    refresh.start(1000 / hz);
    QTimer::singleShot(int(seconds * 1000), &app, &QCoreApplication::quit);
    app.exec();
    if (parser.isSet("screenshot") && !dashboard.grab().save(parser.value("screenshot"), "PNG")) {
        std::fprintf(stderr, "cannot write %s\n", qPrintable(parser.value("screenshot")));
        return 1;
    }

    // QCustomPlot's own running average of each plot's paint time.
    QJsonObject perPlot;
    for (QCustomPlot *plot : dashboard.plots()) {
        auto *title = qobject_cast<QCPTextElement *>(plot->plotLayout()->element(0, 0));
        perPlot.insert(title ? title->text() : plot->objectName(), plot->replotTime(true));
    }
    double sum = 0;
    for (double v : replotMs)
        sum += v;
    const QJsonObject out{
        {"bench", "dashboard"},
        {"workers", workers},
        {"frames_per_s", fps},
        {"refresh_hz", hz},
        {"seconds", seconds},
        {"frames", double(frames)},
        {"rounds", double(dashboard.model().roundCount())},
        {"replots", int(replotMs.size())},
        {"replot_ms", QJsonObject{{"median", percentile(replotMs, 0.5)},
                                  {"p99", percentile(replotMs, 0.99)},
                                  {"max", percentile(replotMs, 1.0)},
                                  {"mean", replotMs.empty() ? 0 : sum / double(replotMs.size())}}},
        {"target_median_ms", 16},
        // How often a plot is brought up to date: a refresh paints only what fits in a frame.
        {"paints_per_plot_per_s", double(plotPaints) / double(dashboard.plots().size()) / seconds},
        {"paint_ms_per_plot", perPlot},
        {"points_held", double(dashboard.pointCount())},
        {"rss_mb", QJsonObject{{"after_setup", rssStart}, {"end", rssMb()}}},
        {"platform", QGuiApplication::platformName()},
    };
    std::printf("%s\n", QJsonDocument(out).toJson(QJsonDocument::Compact).constData());
    return 0;
}
