// Test helper for tst_run_store: records a synthetic run into a store in a
// loop, as `dlion run` does, until it is killed. After every commit it
// prints "committed ROUNDS_PER_WORKER EVALS MERGES" on stdout, and
// "failed MESSAGE" when recording fails (it goes on, retrying).
// Usage: store_writer STORE_PATH [FLUSH_MS]
#include "store_test_data.h"

#include <run_recorder.h>
#include <run_store.h>

#include <QCoreApplication>
#include <QTimer>

#include <cstdio>

using namespace dlion;

int main(int argc, char **argv)
{
    QCoreApplication app(argc, argv);
    if (argc < 2) {
        std::fprintf(stderr, "usage: store_writer STORE [FLUSH_MS]\n");
        return 2;
    }
    core::RunStore store;
    if (!store.open(QString::fromLocal8Bit(argv[1]), core::RunStore::Mode::ReadWrite)) {
        std::fprintf(stderr, "%s\n", qPrintable(store.errorString()));
        return 1;
    }
    protocol::JobSpec job;
    job.dataset = QStringLiteral("synthetic");
    job.model = QStringLiteral("mlp");
    job.budget.seconds = 3600;
    core::RunData data;
    data.reset(job, 2);
    data.markStarted();
    core::RunRecorder recorder(&store);
    recorder.setFlushInterval(argc > 2 ? atoi(argv[2]) : 50);
    recorder.setCompactionRounds(200);  // exercise compaction while being killed
    QObject::connect(&recorder, &core::RunRecorder::committed, [&data] {
        std::printf("committed %lld %lld %lld\n", (long long)data.rounds(0).size(), (long long)data.evals().size(),
                    (long long)data.merges().size());
        std::fflush(stdout);
    });
    QObject::connect(&recorder, &core::RunRecorder::recordingFailed, [](const QString &why) {
        std::printf("failed %s\n", qPrintable(why));
        std::fflush(stdout);
    });
    if (!recorder.begin(&data))
        return 1;
    qint64 round = 0;
    QTimer producer;
    QObject::connect(&producer, &QTimer::timeout, [&] {
        protocol::TelemetryBatch b;
        for (int k = 0; k < 4; ++k, ++round) {
            b.rounds << test::syntheticRound(0, round) << test::syntheticRound(1, round);
            if (round % 16 == 0)
                b.evals.append({0, round, double(round) / 64.0, 0.5, 1.0, 0.5, 1.0, 100, false});
            if (round % 64 == 0)
                b.merges.append({round, double(round) / 64.0, 0, 1, 0.5, 0.75, 0.5, false});
        }
        data.add(b);
    });
    producer.start(5);
    return app.exec();
}
