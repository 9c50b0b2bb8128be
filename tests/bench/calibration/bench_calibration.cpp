// Calibrates the link emulator against real links: the same job on 3 agents
// in network namespaces joined by tc-shaped veth pairs (40/20/10 Mbit/s, as
// wan-hetero) and on 3 local agents over loopback with the emulator playing
// those rates, compared by time per round. Prints one JSON object.
// Needs root and iproute2 (prints {"skipped": why} otherwise).
// Usage: bench_calibration [--seconds S] [--strategies allreduce,dlion]
#include "cluster_fixture.h"
#include "netns_agents.h"
#include "common/median.h"

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <algorithm>
#include <cstdio>

using namespace dlion;

namespace {

constexpr int kNodes = test::kWanNodes;

struct Timing {
    double roundS = 0;  // median over workers of the mean round time
    double commS = 0;   // median over workers of the mean communication time
    qsizetype rounds = 0;
    QJsonArray carriedMbps;  // per worker and outgoing link: bytes put on it over the run
};

using dlion::test::median;

// Skips the first fifth of the rounds: probes and estimates settling.
Timing timing(const core::RunData &d)
{
    std::vector<double> round, comm;
    Timing out;
    for (int w = 0; w < d.workers(); ++w) {
        const auto &r = d.rounds(w);
        const qsizetype from = r.size() / 5;
        if (r.size() - from < 3)
            continue;
        round.push_back((r.last().t - r[from].t) / double(r.size() - 1 - from));
        double c = 0;
        for (qsizetype i = from; i < r.size(); ++i)
            c += r[i].commS;
        comm.push_back(c / double(r.size() - from));
        out.rounds = std::max(out.rounds, r.size());
        QJsonArray links;
        for (int j = 0; j < d.workers(); ++j) {
            double bytes = 0;
            for (qsizetype i = from + 1; i < r.size(); ++i)
                bytes += std::size_t(j) < r[i].linkBytes.size() ? r[i].linkBytes[std::size_t(j)] : 0.0;
            links.append(bytes * 8e-6 / (r.last().t - r[from].t));
        }
        out.carriedMbps.append(links);
    }
    out.roundS = median(round);
    out.commS = median(comm);
    return out;
}

QJsonObject toJson(const Timing &t)
{
    return {{"round_s", t.roundS}, {"comm_s", t.commS}, {"rounds", qint64(t.rounds)}, {"carried_mbps", t.carriedMbps}};
}

} // namespace

int main(int argc, char **argv)
{
    QCoreApplication app(argc, argv);
    QCommandLineParser parser;
    parser.addOption({"seconds", "Training time per run.", "S", "12"});
    parser.addOption({"strategies", "Comma-separated strategies.", "LIST", "allreduce,dlion"});
    parser.process(app);
    const auto print = [](const QJsonObject &o) { std::printf("%s", QJsonDocument(o).toJson().constData()); };

    if (const QString why = test::NetnsTestbed::skipReason(); !why.isEmpty()) {
        print({{"benchmark", "emulator_calibration"}, {"skipped", why}});
        return 0;
    }
    test::NetnsTestbed bed;
    QString error;
    if (!bed.up(kNodes, test::wanHeteroMbps, &error)) {
        std::fprintf(stderr, "bench_calibration: %s\n", qPrintable(error));
        return 1;
    }
    QJsonArray matrix;
    for (int i = 0; i < kNodes; ++i)
        matrix.append(QJsonArray{test::wanHeteroMbps(i, 0), test::wanHeteroMbps(i, 1), test::wanHeteroMbps(i, 2)});

    QJsonArray results;
    for (const QString &strategy : parser.value("strategies").split(',')) {
        protocol::JobSpec job;
        job.strategy = strategy;
        job.dataset = "synthetic";
        job.model = "lenet5";
        job.budget.seconds = parser.value("seconds").toDouble();
        const int timeoutMs = int(job.budget.seconds * 1000) + 120000;

        core::RunSession onTc;
        test::NetnsAgents agents(bed, kNodes);
        QString message;
        if (!agents.run(job, onTc, &message, {}, timeoutMs)) {
            std::fprintf(stderr, "bench_calibration: %s over tc links: %s\n", qPrintable(strategy), qPrintable(message));
            return 1;
        }
        const Timing tc = timing(onTc.data());

        job.emulation = QJsonObject{{"links", matrix}, {"latency_ms", 0}};
        test::LocalRun local;
        if (!local.start(job, kNodes) || !local.waitFinished(timeoutMs) || !local.ok) {
            std::fprintf(stderr, "bench_calibration: %s emulated: %s\n", qPrintable(strategy), qPrintable(local.message));
            return 1;
        }
        const Timing emulated = timing(local.session->data());
        results.append(QJsonObject{{"strategy", strategy},
                                   {"tc", toJson(tc)},
                                   {"emulated", toJson(emulated)},
                                   {"round_time_ratio", tc.roundS > 0 ? emulated.roundS / tc.roundS : 0}});
    }
    print({{"benchmark", "emulator_calibration"},
           {"links_mbps", matrix},
           {"latency_ms", 0},
           {"seconds", parser.value("seconds").toDouble()},
           {"target", "round_time_ratio within 0.85-1.15"},
           {"results", results}});
    return 0;
}
