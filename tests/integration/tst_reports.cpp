// Reports and comparisons made from real runs recorded in a real store:
// local dlion-agent processes train the synthetic MLP for a few seconds.
#include "cluster_fixture.h"

#include <report_writer.h>
#include <run_comparison.h>
#include <run_recorder.h>
#include <run_store.h>

#include <QCryptographicHash>
#include <QDir>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QXmlStreamReader>

using namespace dlion;

namespace {

struct Cli {
    int code = -1;
    QString out, err;
};

Cli runCli(const QStringList &args, int timeoutMs = 60000)
{
    QProcess p;
    p.setProcessChannelMode(QProcess::SeparateChannels);
    p.setStandardInputFile(QProcess::nullDevice());
    p.start(qEnvironmentVariable("DLION_CLI"), args);
    if (!p.waitForFinished(timeoutMs))
        p.kill();
    p.waitForFinished(5000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardOutput()),
            QString::fromUtf8(p.readAllStandardError())};
}

QByteArray fileHash(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256) : QByteArray();
}

QList<QByteArray> csvLines(const QString &path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return {};
    QList<QByteArray> lines = f.readAll().split('\n');
    if (!lines.isEmpty() && lines.last().isEmpty())
        lines.removeLast();
    return lines;
}

// Share of pixels that are not (near) white.
double ink(const QImage &image)
{
    const QImage img = image.convertToFormat(QImage::Format_RGB32);
    qint64 dark = 0;
    for (int y = 0; y < img.height(); ++y) {
        const auto *line = reinterpret_cast<const QRgb *>(img.constScanLine(y));
        for (int x = 0; x < img.width(); ++x)
            dark += qGray(line[x]) < 235;
    }
    return double(dark) / double(img.width() * img.height());
}

} // namespace

class TestReports : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void htmlReportParsesAndHasEverySection();
    void pdfReportHasItsPagesAndIsNotBlank();
    void csvMatchesTheStoredRows();
    void jsonReportIsTheStoredSummary();
    void comparisonTable();
    void cliListsReportsAndCompares();
    void cliBadInputsGetClearMessages();
    void cliRunRecordsTheRun();

private:
    bool recordRun(const QString &strategy, quint64 seed);

    QTemporaryDir m_dir;
    QString m_store;
    QList<qint64> m_ids;
    std::optional<core::StoredRun> m_run;
    QJsonObject m_liveSummary;
};

bool TestReports::recordRun(const QString &strategy, quint64 seed)
{
    protocol::JobSpec job;
    job.strategy = strategy;
    job.dataset = QStringLiteral("synthetic");
    job.model = QStringLiteral("mlp");
    job.seed = seed;
    job.budget.seconds = 4;
    job.evalIntervalS = 0.5;
    job.evalSamples = 1000;
    core::RunStore store;
    if (!store.open(m_store, core::RunStore::Mode::ReadWrite))
        return false;
    core::RunRecorder recorder(&store);
    recorder.setCluster(QJsonObject{{"kind", "local"}, {"workers", 2}});
    test::LocalRun run;
    recorder.attach(run.session.get());
    if (!run.start(job, 2) || !run.waitFinished(120000) || !run.ok)
        return false;
    run.session->shutdownAgents();
    m_liveSummary = run.session->data().summary();
    m_ids << recorder.runId();
    return recorder.runId() > 0;
}

void TestReports::initTestCase()
{
    QVERIFY(m_dir.isValid());
    m_store = m_dir.filePath(QStringLiteral("runs.sqlite"));
    QVERIFY2(recordRun(QStringLiteral("allreduce"), 2), "second run");
    QVERIFY2(recordRun(QStringLiteral("allreduce"), 1), "first run");
    core::RunStore store;
    QVERIFY(store.open(m_store, core::RunStore::Mode::ReadOnly));
    m_run = store.loadRun(m_ids.last());
    QVERIFY2(m_run, qPrintable(store.errorString()));
    QCOMPARE(m_run->info.status, QStringLiteral("finished"));
    QVERIFY(m_run->data.rounds(0).size() > 20);
    QVERIFY(m_run->data.evals().size() >= 4);
}

void TestReports::htmlReportParsesAndHasEverySection()
{
    const QString path = m_dir.filePath(QStringLiteral("report.html"));
    const report::Result r = report::writeReport(*m_run, report::Format::Html, path);
    QVERIFY2(r.ok, qPrintable(r.error));
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QXmlStreamReader xml(&f);
    QSet<QString> sections;
    int images = 0;
    bool title = false;
    while (!xml.atEnd()) {
        xml.readNext();
        if (!xml.isStartElement())
            continue;
        if (xml.name() == QLatin1String("section"))
            sections << xml.attributes().value(QLatin1String("id")).toString();
        if (xml.name() == QLatin1String("title"))
            title = xml.readElementText().contains(QStringLiteral("DLion run %1").arg(m_run->info.id));
        if (xml.name() == QLatin1String("img")) {
            const QString src = xml.attributes().value(QLatin1String("src")).toString();
            QVERIFY(src.startsWith(QLatin1String("data:image/png;base64,")));  // self-contained
            QImage img;
            QVERIFY(img.loadFromData(QByteArray::fromBase64(src.mid(22).toLatin1()), "PNG"));
            QVERIFY(img.width() > 600 && ink(img) > 0.01);
            ++images;
        }
    }
    QVERIFY2(!xml.hasError(), qPrintable(xml.errorString() + QStringLiteral(" at line %1").arg(xml.lineNumber())));
    QVERIFY(title);
    for (const char *id : {"summary", "metrics", "accuracy", "loss", "shares", "bandwidth", "priority", "merges"})
        QVERIFY2(sections.contains(QString::fromLatin1(id)), id);
    QVERIFY(images >= 5);  // accuracy x2, loss x2, shares (+ links, merges where the strategy has them)
    f.seek(0);
    const QString text = QString::fromUtf8(f.readAll());
    QVERIFY(text.contains(m_run->info.codeVersion.toHtmlEscaped()));
    QVERIFY(text.contains(QStringLiteral("Final test accuracy")));
    // What each worker trained on, as it reported at its start.
    const auto &data = m_run->data.dataSummary(0);
    QVERIFY(data && data->samples > 0);
    QStringList histogram;
    for (qsizetype c = 0; c < data->histogram.size(); ++c)
        histogram.append(QStringLiteral("%1: %2").arg(c).arg(data->histogram[c]));
    QVERIFY2(text.contains(QStringLiteral("Data per worker")) && text.contains(histogram.join(QStringLiteral(", "))),
             qPrintable(histogram.join(QStringLiteral(", "))));
    QVERIFY(!text.contains(QLatin1String("http://")) && !text.contains(QLatin1String("https://")));
}

void TestReports::pdfReportHasItsPagesAndIsNotBlank()
{
    const QString pdfinfo = QStandardPaths::findExecutable(QStringLiteral("pdfinfo"));
    const QString pdftoppm = QStandardPaths::findExecutable(QStringLiteral("pdftoppm"));
    if (pdfinfo.isEmpty() || pdftoppm.isEmpty())
        QSKIP("pdfinfo/pdftoppm not installed (Debian package poppler-utils, see installer/install-deps.sh)");
    const QString path = m_dir.filePath(QStringLiteral("report.pdf"));
    const report::Result r = report::writeReport(*m_run, report::Format::Pdf, path);
    QVERIFY2(r.ok, qPrintable(r.error));
    QVERIFY(r.pages >= 4);  // summary, accuracy and loss, shares, links and merges

    QProcess info;
    info.start(pdfinfo, {path});
    QVERIFY(info.waitForFinished(30000));
    const QString infoText = QString::fromUtf8(info.readAllStandardOutput());
    QRegularExpressionMatch m = QRegularExpression(QStringLiteral("Pages:\\s+(\\d+)")).match(infoText);
    QVERIFY2(m.hasMatch(), qPrintable(infoText));
    QCOMPARE(m.captured(1).toInt(), r.pages);
    QVERIFY(infoText.contains(QStringLiteral("DLion run %1").arg(m_run->info.id)));

    QProcess render;
    render.start(pdftoppm, {QStringLiteral("-r"), QStringLiteral("40"), QStringLiteral("-png"), path,
                            m_dir.filePath(QStringLiteral("page"))});
    QVERIFY(render.waitForFinished(60000));
    QCOMPARE(render.exitCode(), 0);
    const QStringList pages = QDir(m_dir.path()).entryList({QStringLiteral("page-*.png")}, QDir::Files, QDir::Name);
    QCOMPARE(pages.size(), r.pages);
    for (const QString &page : pages) {
        const QImage img(m_dir.filePath(page));
        QVERIFY(!img.isNull());
        QVERIFY2(ink(img) > 0.005, qPrintable(page + QStringLiteral(" is blank")));
    }
    // The plot pages carry plots, not just a heading.
    QVERIFY(ink(QImage(m_dir.filePath(pages[1]))) > 0.03);
}

void TestReports::csvMatchesTheStoredRows()
{
    const QString dir = m_dir.filePath(QStringLiteral("csv"));
    const report::Result r = report::writeReport(*m_run, report::Format::Csv, dir);
    QVERIFY2(r.ok, qPrintable(r.error));
    QCOMPARE(r.files.size(), 5);
    const core::RunData &d = m_run->data;
    qint64 rounds = 0, links = 0;
    for (int w = 0; w < d.workers(); ++w) {
        rounds += d.rounds(w).size();
        for (const auto &rec : d.rounds(w)) {
            const size_t n = std::max(rec.linkMbps.size(), rec.linkFraction.size());
            for (size_t j = 0; j < n; ++j)
                links += int(j) != w ? 1 : 0;  // no row for a worker's link to itself
        }
    }
    const auto roundLines = csvLines(dir + "/rounds.csv");
    QCOMPARE(roundLines.first(), QByteArray("worker,round,t,batch,share,rate,compute_s,comm_s,loss,slowdown,bytes_sent,param_digest"));
    QCOMPARE(roundLines.size() - 1, rounds);
    const auto linkLines = csvLines(dir + "/links.csv");
    QCOMPARE(linkLines.first(), QByteArray("worker,round,t,peer,mbps,fraction"));
    QCOMPARE(linkLines.size() - 1, links);
    const auto evalLines = csvLines(dir + "/evals.csv");
    QCOMPARE(evalLines.first(), QByteArray("worker,round,t,accuracy,loss,global_accuracy,global_loss,samples,final,min_accuracy,max_accuracy,"
                                                  "consensus_accuracy"));
    QCOMPARE(evalLines.size() - 1, d.evals().size());
    const auto mergeLines = csvLines(dir + "/merges.csv");
    QCOMPARE(mergeLines.first(), QByteArray("round,t,from,to,score_before,score_from,alpha,manual"));
    QCOMPARE(mergeLines.size() - 1, d.merges().size());
    // Spot check: the last round of worker 1 is the last line, field by field.
    const auto &last = d.rounds(1).constLast();
    const QList<QByteArray> f = roundLines.last().split(',');
    QCOMPARE(f[0].toInt(), 1);
    QCOMPARE(f[1].toLongLong(), last.round);
    QCOMPARE(f[3].toInt(), last.batch);
    QCOMPARE(f[10].toLongLong(), last.bytesSent);
    const auto summary = csvLines(dir + "/summary.csv");
    QCOMPARE(summary.first(), QByteArray("key,value"));
    QVERIFY(summary.contains("run_id," + QByteArray::number(m_run->info.id)));
}

void TestReports::jsonReportIsTheStoredSummary()
{
    const QString path = m_dir.filePath(QStringLiteral("run.json"));
    const report::Result r = report::writeReport(*m_run, report::Format::Json, path);
    QVERIFY2(r.ok, qPrintable(r.error));
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject o = QJsonDocument::fromJson(f.readAll()).object();
    QCOMPARE(o.value("run").toObject().value("id").toInteger(), m_run->info.id);
    QCOMPARE(o.value("rounds").toArray().size(), 2);
    QCOMPARE(o.value("rounds").toArray()[0].toArray().size(), m_run->data.rounds(0).size());
    // What the live session reported is what the store gives back.
    for (const char *key : {"strategy", "workers", "final_accuracy", "time_to_accuracy", "bytes_sent", "merges",
                            "samples", "status", "started_at"})
        QVERIFY2(o.value(QLatin1String(key)) == m_liveSummary.value(QLatin1String(key)), key);
    QVERIFY(std::abs(o.value("samples_per_s").toDouble() - m_liveSummary.value("samples_per_s").toDouble()) < 1e-3);
}

void TestReports::comparisonTable()
{
    core::RunStore store;
    QVERIFY(store.open(m_store, core::RunStore::Mode::ReadOnly));
    QList<core::StoredRun> runs;
    for (qint64 id : m_ids)
        runs << *store.loadRun(id);
    const auto c = report::Comparison::build(runs, m_ids[0], 0.5, 2.0);
    QCOMPARE(c.rows.size(), 2);
    QCOMPARE(c.baselineId, m_ids[0]);
    QVERIFY(c.rows[0].isBaseline);
    QVERIFY(c.rows[0].timeToTarget.has_value());
    QCOMPARE(*c.rows[0].speedup, 1.0);
    QVERIFY(c.rows[1].speedup.has_value());
    QCOMPARE(c.rows[1].bytesSent, runs[1].data.totalBytesSent());
    QVERIFY(c.rows[0].accuracyAtBudget > 0);
    QVERIFY(!c.rows[0].curve.x.isEmpty());
    QVERIFY(c.toText().contains(QStringLiteral("(baseline)")));
    QCOMPARE(c.toJson().value("results").toArray().size(), 2);
}

void TestReports::cliListsReportsAndCompares()
{
    const QString id = QString::number(m_run->info.id);
    const QByteArray before = fileHash(m_store);
    Cli r = runCli({"runs", "--store", m_store});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.contains(QStringLiteral("allreduce")));
    r = runCli({"runs", "--store", m_store, "--json", "--strategy", "allreduce"});
    QCOMPARE(r.code, 0);
    QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8()).array().size(), 2);
    r = runCli({"runs", "--store", m_store, "--strategy", "gaia"});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.contains(QStringLiteral("No runs match")));

    for (const char *format : {"html", "pdf", "json"}) {
        const QString out = m_dir.filePath(QStringLiteral("cli.") + QLatin1String(format));
        r = runCli({"report", id, "--store", m_store, "-o", out});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        QVERIFY(r.out.contains(QStringLiteral("wrote")));
        QVERIFY(QFileInfo(out).size() > 1000);
    }
    r = runCli({"report", "last", "--store", m_store, "--format", "csv", "-o", m_dir.filePath("cli-csv")});
    QCOMPARE(r.code, 0);
    QVERIFY(QFile::exists(m_dir.filePath("cli-csv/rounds.csv")));
    r = runCli({"compare", QString::number(m_ids[0]), QString::number(m_ids[1]), "--store", m_store, "--format", "json"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8()).object().value("results").toArray().size(), 2);
    r = runCli({"compare", QString::number(m_ids[0]), QString::number(m_ids[1]), "--store", m_store, "--baseline",
                QString::number(m_ids[1])});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.contains(QStringLiteral("(baseline)")));
    r = runCli({"compare", QString::number(m_ids[0]), QString::number(m_ids[1]), "--store", m_store, "--format", "html",
                "-o", m_dir.filePath("compare.html")});
    QCOMPARE(r.code, 0);
    QVERIFY(QFileInfo(m_dir.filePath("compare.html")).size() > 1000);
    // None of the above wrote to the store.
    QCOMPARE(fileHash(m_store), before);

    // Tags and notes (these do write), then filter by tag and search notes.
    QCOMPARE(runCli({"tag", id, "paper", "fig3", "--store", m_store}).code, 0);
    QCOMPARE(runCli({"note", id, "baseline for figure 3", "--store", m_store}).code, 0);
    r = runCli({"runs", "--store", m_store, "--tag", "fig3", "--json"});
    QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8()).array().size(), 1);
    r = runCli({"runs", "--store", m_store, "--search", "figure 3", "--json"});
    QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8()).array().size(), 1);
    for (const char *cmd : {"runs", "report", "compare", "tag", "note"}) {
        r = runCli({cmd, "--help"});
        QCOMPARE(r.code, 0);
        QVERIFY(r.out.contains(QStringLiteral("--store")));
    }
}

void TestReports::cliBadInputsGetClearMessages()
{
    // Unknown run id: exit 2, and how to see run ids.
    Cli r = runCli({"report", "999", "--store", m_store});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(QStringLiteral("no run 999")) && r.err.contains(QStringLiteral("dlion runs")), qPrintable(r.err));
    QCOMPARE(r.err.count(QLatin1Char('\n')), 1);
    QCOMPARE(runCli({"compare", "1", "999", "--store", m_store}).code, 2);
    QCOMPARE(runCli({"report", "abc", "--store", m_store}).code, 2);
    QCOMPARE(runCli({"report", "1", "--format", "docx", "--store", m_store}).code, 2);
    QCOMPARE(runCli({"compare", "1", "--store", m_store}).code, 2);
    QCOMPARE(runCli({"runs", "--bogus"}).code, 2);

    // Unwritable output path: exit 1, the path named.
    const QString bad = QStringLiteral("/proc/dlion-no-such-dir/report.html");
    r = runCli({"report", "last", "--store", m_store, "-o", bad});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains(bad), qPrintable(r.err));
    r = runCli({"report", "last", "--store", m_store, "--format", "pdf", "-o", "/proc/dlion-no/r.pdf"});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains(QStringLiteral("/proc/dlion-no/r.pdf")), qPrintable(r.err));

    // Corrupted database: exit 1, the file named, said to be unmodified, and it is.
    const QString corrupt = m_dir.filePath(QStringLiteral("corrupt.sqlite"));
    {
        QFile::copy(m_store, corrupt);
        QFile f(corrupt);
        QVERIFY(f.open(QIODevice::ReadWrite));
        f.seek(0);
        f.write(QByteArray(64, '\x5a'));  // smash the header
    }
    const QByteArray before = fileHash(corrupt);
    for (const QStringList &args : {QStringList{"runs"}, QStringList{"report", "1"}, QStringList{"compare", "1", "2"},
                                    QStringList{"tag", "1", "x"}}) {
        r = runCli(args + QStringList{"--store", corrupt});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains(corrupt) && r.err.contains(QStringLiteral("not modified")), qPrintable(r.err));
    }
    QCOMPARE(fileHash(corrupt), before);

    // No store yet: runs says so; report fails naming the file; neither creates it.
    const QString missing = m_dir.filePath(QStringLiteral("none/runs.sqlite"));
    r = runCli({"runs", "--store", missing});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.contains(QStringLiteral("No runs recorded yet")));
    r = runCli({"report", "1", "--store", missing});
    QCOMPARE(r.code, 1);
    QVERIFY(r.err.contains(missing));
    QVERIFY(!QFile::exists(missing));

    // Delete asks for confirmation; without a terminal it needs --yes.
    r = runCli({"runs", "--store", m_store, "--delete", "1"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains(QStringLiteral("--yes")));
}

void TestReports::cliRunRecordsTheRun()
{
    const QString store = m_dir.filePath(QStringLiteral("cli-store.sqlite"));
    const QString out = m_dir.filePath(QStringLiteral("cli-run"));
    Cli r = runCli({"run", "--workers", "2", "--dataset", "synthetic", "--model", "mlp", "--seconds", "3", "--quiet",
                    "--store", store, "--out", out},
                   180000);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains(QStringLiteral("run id: 1")), qPrintable(r.out));
    QFile f(out + "/summary.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject live = QJsonDocument::fromJson(f.readAll()).object();
    core::RunStore s;
    QVERIFY(s.open(store, core::RunStore::Mode::ReadOnly));
    const auto run = s.loadRun(1);
    QVERIFY(run);
    QCOMPARE(run->info.status, QStringLiteral("finished"));
    QCOMPARE(run->info.outDir, QFileInfo(out).absoluteFilePath());
    const QJsonObject stored = run->summary();
    for (const char *key : {"final_accuracy", "time_to_accuracy", "bytes_sent", "samples", "evals", "started_at", "ended_at"})
        QVERIFY2(stored.value(QLatin1String(key)) == live.value(QLatin1String(key)), key);
    // The delete path, now that a throw-away store exists.
    QCOMPARE(runCli({"runs", "--store", store, "--delete", "1", "--yes"}).code, 0);
    QVERIFY(!s.runInfo(1));
}

QTEST_MAIN(TestReports)
#include "tst_reports.moc"
