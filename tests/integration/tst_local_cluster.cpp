// Real dlion-agent processes on loopback training real Fashion-MNIST.
#include "child_processes.h"
#include "cluster_fixture.h"
#include "own_data_fixture.h"

#include <run_recorder.h>
#include <run_store.h>

#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>
#include <QTcpSocket>
#include <QTemporaryDir>

#include <csignal>
#include <map>
#include <set>
#include <tuple>

using namespace dlion;

class TestLocalCluster : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void allreduceReaches80PercentWithIdenticalReplicas();
    void pauseAndResumeAreAgreedByAllWorkers();
    void missingDatasetFailsWithClearMessage();
    void cliRunWritesSummaryAndRejectsBadFlags();
    void idleAgentExitsByItself();
    void agentsNeverOutliveTheCli_data();
    void agentsNeverOutliveTheCli();
    void attachTakesOverAfterTheCliDies();
    void telemetryTheControllerDidNotStoreIsReplayed();
    void strangerOnTheDataPlaneCannotJoinOrInject();
    void workersTrainOnTheirOwnFolders();
    void ownDataOfOtherClassesFailsClearly();
    void modelsThatCannotTakeTheSamplesFailClearly();
};

namespace {

// Loads finished run `id` into `out` and checks that it lost nothing: every
// worker's rounds run 0, 1, 2, ... without a gap or a repeat, and no
// evaluation is stored twice.
void loadCompleteRun(core::RunStore &store, qint64 id, core::RunData *out)
{
    const auto run = store.loadRun(id);
    QVERIFY2(run, qPrintable(store.errorString()));
    QCOMPARE(run->info.status, QStringLiteral("finished"));
    const core::RunData &d = *out = run->data;
    for (int w = 0; w < d.workers(); ++w) {
        const auto &rounds = d.rounds(w);
        QVERIFY2(!rounds.isEmpty(), qPrintable(QStringLiteral("worker %1 has no rounds").arg(w)));
        for (qsizetype i = 0; i < rounds.size(); ++i)
            QVERIFY2(rounds[i].round == i,
                     qPrintable(QStringLiteral("worker %1: round %2 stored at %3; %4 rounds stored, the last is %5")
                                    .arg(w).arg(rounds[i].round).arg(i).arg(rounds.size()).arg(rounds.last().round)));
    }
    std::set<std::tuple<int, qint64, bool>> evals;
    for (const auto &e : d.evals())
        QVERIFY2(evals.insert({e.worker, e.round, e.final}).second,
                 qPrintable(QStringLiteral("worker %1: evaluation at round %2 stored twice").arg(e.worker).arg(e.round)));
}

} // namespace

void TestLocalCluster::allreduceReaches80PercentWithIdenticalReplicas()
{
    protocol::JobSpec job;
    job.strategy = "allreduce";
    job.model = "lenet5";
    job.dataset = "fashion-mnist";
    job.batchSize = 32;
    job.budget.targetAccuracy = 0.80;
    job.budget.maxRounds = 2500;  // the bound on steps
    job.evalIntervalS = 1.0;
    job.evalSamples = 3000;
    job.verifyReplicas = true;
    // Buckets of 10 KB: LeNet-5's gradient goes in three all-reduces, two
    // of them started while backward runs; the replicas must stay identical.
    job.strategyOptions[QStringLiteral("bucket_mb")] = 0.01;
    test::LocalRun run;
    QVERIFY(run.start(job, 3));
    QVERIFY(run.waitFinished(180000));
    QVERIFY2(run.ok, qPrintable(run.message));

    const core::RunData &d = run.session->data();
    const auto final = d.lastGlobalEval();
    QVERIFY(final);
    QVERIFY2(final->globalAccuracy >= 0.80, qPrintable(QString::number(final->globalAccuracy)));
    QVERIFY(d.rounds(0).size() < 2500);
    // BSP: after every step all three replicas hold the same parameters.
    std::map<qint64, std::set<quint64>> digests;
    for (int w = 0; w < 3; ++w) {
        QVERIFY(d.rounds(w).size() > 10);
        for (const auto &r : d.rounds(w)) {
            QVERIFY(r.paramDigest != 0);
            digests[r.round].insert(r.paramDigest);
            QCOMPARE(r.batch, 32);
        }
    }
    for (const auto &[round, set] : digests)
        QVERIFY2(set.size() == 1, qPrintable(QString("replicas differ after round %1").arg(round)));
    QVERIFY(d.timeToAccuracy(0.80).has_value());
}

void TestLocalCluster::pauseAndResumeAreAgreedByAllWorkers()
{
    protocol::JobSpec job;
    job.dataset = "synthetic";
    job.model = "mlp";
    job.budget.seconds = 120;
    test::LocalRun run;
    QVERIFY(run.start(job, 2));
    core::RunSession &s = *run.session;
    QTRY_VERIFY_WITH_TIMEOUT(s.data().rounds(0).size() > 20 && s.data().rounds(1).size() > 20, 60000);
    s.pause();
    const auto paused = protocol::WorkerState::Paused;
    QTRY_VERIFY_WITH_TIMEOUT(s.workerState(0) == paused && s.workerState(1) == paused, 20000);
    // Telemetry is flushed every 100 ms and heartbeats come every second on
    // the same ordered stream, so after two heartbeats nothing from before
    // the pause is in flight; after two more, no new round may have arrived.
    QSignalSpy heartbeats(&s, &core::RunSession::heartbeat);
    QTRY_VERIFY_WITH_TIMEOUT(heartbeats.count() >= 4, 10000);
    const qsizetype frozen = s.data().rounds(0).size();
    heartbeats.clear();
    QTRY_VERIFY_WITH_TIMEOUT(heartbeats.count() >= 4, 10000);
    QCOMPARE(s.data().rounds(0).size(), frozen);
    s.resume();
    QTRY_VERIFY_WITH_TIMEOUT(s.data().rounds(0).size() > frozen + 20, 30000);
    s.stop();
    QVERIFY(run.waitFinished(60000));
    QVERIFY2(run.ok, qPrintable(run.message));
    // Both stopped at the same round, each with a final evaluation.
    QCOMPARE(s.data().rounds(0).size(), s.data().rounds(1).size());
    QVERIFY(s.data().lastGlobalEval()->final);
}

void TestLocalCluster::missingDatasetFailsWithClearMessage()
{
    QTemporaryDir empty;
    protocol::JobSpec job;
    job.dataDir = empty.path();
    job.budget.seconds = 30;
    test::LocalRun run;
    QVERIFY(run.start(job, 2));
    QVERIFY(run.waitFinished(60000));
    QVERIFY(!run.ok);
    QVERIFY2(run.message.contains("train-images-idx3-ubyte.gz"), qPrintable(run.message));
}

void TestLocalCluster::cliRunWritesSummaryAndRejectsBadFlags()
{
    const QString cli = qEnvironmentVariable("DLION_CLI");
    QVERIFY(!cli.isEmpty());
    QTemporaryDir out;
    // Flags override the job file field by field: --links keeps its schedule.
    const QString job = QDir(out.path()).filePath("job.yaml");
    QFile jf(job);
    QVERIFY(jf.open(QIODevice::WriteOnly));
    jf.write("emulation:\n  schedule:\n    - {at_s: 1000, worker: 0, slowdown: 2}\n");
    jf.close();
    QProcess p;
    p.start(cli, {"run", "--config", job, "--links", "lan", "--workers", "2", "--dataset", "synthetic", "--model", "mlp",
                  "--max-rounds", "60", "--out", out.path(), "--quiet"});
    QVERIFY(p.waitForFinished(120000));
    QCOMPARE(p.exitCode(), 0);
    QVERIFY(p.readAllStandardOutput().contains("summary.json"));
    QFile f(QDir(out.path()).filePath("summary.json"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(f.readAll()).object();
    for (const char *key : {"strategy", "workers", "wall_s", "samples_per_s", "final_accuracy", "time_to_accuracy",
                            "bytes_sent", "merges", "rounds"})
        QVERIFY2(s.contains(key), key);
    QCOMPARE(s.value("workers").toInt(), 2);
    QCOMPARE(s.value("rounds").toArray().size(), 2);
    QCOMPARE(s.value("rounds").toArray().at(0).toArray().size(), 60);
    QVERIFY(s.value("time_to_accuracy").toObject().contains("0.85"));
    const QJsonObject emulation = s.value("job").toObject().value("emulation").toObject();
    QCOMPARE(emulation.value("links").toString(), QString("lan"));
    QCOMPARE(emulation.value("schedule").toArray().size(), 1);

    p.start(cli, {"run", "--strategy", "sgd", "--out", out.path()});
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitCode(), 2);
    QVERIFY(p.readAllStandardError().contains("\"strategy\""));
}


void TestLocalCluster::idleAgentExitsByItself()
{
    QProcess agent;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("DLION_SECRET", "0123456789abcdef0123456789abcdef");
    agent.setProcessEnvironment(env);
    agent.start(qEnvironmentVariable("DLION_AGENT"), {"--listen", "127.0.0.1:0", "--idle-exit", "1"});
    QVERIFY(agent.waitForStarted());
    QVERIFY(agent.waitForFinished(20000));
    QCOMPARE(agent.exitStatus(), QProcess::NormalExit);
    QCOMPARE(agent.exitCode(), 0);
    QVERIFY(agent.readAllStandardOutput().contains("listening on 127.0.0.1:"));
    QProcess bad;
    bad.setProcessEnvironment(env);
    bad.start(qEnvironmentVariable("DLION_AGENT"), {"--idle-exit", "soon"});
    QVERIFY(bad.waitForFinished(10000));
    QCOMPARE(bad.exitCode(), 2);
    QVERIFY(bad.readAllStandardError().contains("--idle-exit"));
}

void TestLocalCluster::agentsNeverOutliveTheCli_data()
{
    QTest::addColumn<int>("signal");
    QTest::newRow("Ctrl-C") << int(SIGINT);
    QTest::newRow("SIGKILL") << int(SIGKILL);
}

void TestLocalCluster::agentsNeverOutliveTheCli()
{
    QFETCH(int, signal);
    QTemporaryDir out;
    QProcess p;
    QByteArray seen;
    QList<qint64> agents;
    test::startTrainingRun(p, {"run", "--workers", "3", "--dataset", "synthetic", "--model", "mlp", "--seconds", "300", "--out", out.path()},
                           60000, &seen, &agents);
    if (QTest::currentTestFailed())
        return;
    QCOMPARE(agents.size(), 3);
    ::kill(pid_t(p.processId()), signal);
    QVERIFY(p.waitForFinished(60000));
    if (signal == SIGINT) {
        // A clean stop: the workers finish together and the summary is written.
        QCOMPARE(p.exitCode(), 0);
        QVERIFY(QFile::exists(QDir(out.path()).filePath("summary.json")));
    }
    for (qint64 pid : agents)
        QTRY_VERIFY_WITH_TIMEOUT(!test::alive(pid), 15000);
}

void TestLocalCluster::attachTakesOverAfterTheCliDies()
{
    QTemporaryDir out;
    const QString store = out.filePath("runs.sqlite"), runDir = out.filePath("run");
    const QString attachFile = QDir(runDir).filePath("attach.json");
    QProcess p;
    QByteArray seen;
    QList<qint64> agents;
    test::startTrainingRun(p, {"run", "--workers", "3", "--strategy", "dlion", "--model", "mlp", "--seconds", "20", "--grace", "60", "--out",
                               runDir, "--store", store},
                           60000, &seen, &agents);
    if (QTest::currentTestFailed())
        return;
    QVERIFY(QFile::exists(attachFile));
    QCOMPARE(QFile::permissions(attachFile) & (QFile::ReadOther | QFile::ReadGroup), QFile::Permissions());
    QCOMPARE(agents.size(), 3);
    ::kill(pid_t(p.processId()), SIGKILL);  // the control center crashes
    QVERIFY(p.waitForFinished(10000));
    // The agents train on with nobody attached (that is the point of the wait).
    QTest::qWait(3000);
    for (qint64 pid : agents)
        QVERIFY(test::alive(pid));

    QProcess a;
    a.start(qEnvironmentVariable("DLION_CLI"), {"attach", runDir});
    QVERIFY(a.waitForFinished(120000));
    const QByteArray said = a.readAllStandardOutput() + a.readAllStandardError();
    QVERIFY2(a.exitCode() == 0 && said.contains("run finished"), said.constData());
    QVERIFY(QFile::exists(QDir(runDir).filePath("summary.json")));
    QVERIFY(!QFile::exists(attachFile));

    // One stored run holds all of it, the rounds trained while detached included.
    core::RunStore s;
    QVERIFY2(s.open(store, core::RunStore::Mode::ReadOnly), qPrintable(s.errorString()));
    // Nothing is lost, not even what reached the crashed CLI but not its store.
    core::RunData stored;
    loadCompleteRun(s, 1, &stored);
    if (QTest::currentTestFailed())
        return;
    // Every round each agent says it trained is stored.
    for (int w = 0; w < 3; ++w)
        QVERIFY2(stored.rounds(w).size() == stored.outcome(w).value("rounds").toInteger(),
                 qPrintable(QStringLiteral("worker %1 trained %2 rounds; %3 are stored, the last at %4 s")
                                .arg(w).arg(stored.outcome(w).value("rounds").toInteger()).arg(stored.rounds(w).size())
                                .arg(stored.rounds(w).last().t)));
    for (qint64 pid : agents)
        QTRY_VERIFY_WITH_TIMEOUT(!test::alive(pid), 30000);
}

void TestLocalCluster::telemetryTheControllerDidNotStoreIsReplayed()
{
    // A controller that received telemetry but went away before storing it:
    // the agents keep it until a store commit is acknowledged, and give it
    // to the controller that attaches next.
    QTemporaryDir out;
    const QString storePath = out.filePath("runs.sqlite");
    core::LocalCluster cluster;
    cluster.setGrace(60);
    const QByteArray secret = protocol::handshake::makeSecret();
    QSignalSpy clusterReady(&cluster, &core::LocalCluster::ready);
    cluster.start(2, secret);
    QVERIFY(clusterReady.wait(60000));
    protocol::JobSpec job;
    job.dataset = "synthetic";
    job.model = "mlp";
    job.budget.seconds = 15;
    const quint16 rendezvous = core::pickFreePort();
    qint64 runId = 0;
    QList<qsizetype> received;
    QList<int> members;
    int generation = 0;
    {
        core::RunStore store;
        QVERIFY2(store.open(storePath, core::RunStore::Mode::ReadWrite), qPrintable(store.errorString()));
        core::RunSession session;
        core::RunRecorder recorder(&store);
        recorder.setFlushInterval(3600 * 1000);  // nothing that arrives while training is committed
        recorder.attach(&session);
        session.start(job, cluster.endpoints(), secret, core::LocalCluster::kHost, rendezvous);
        QTRY_VERIFY_WITH_TIMEOUT(session.data().rounds(0).size() > 50 && session.data().rounds(1).size() > 50, 60000);
        QCOMPARE(session.state(), core::RunSession::State::Running);
        runId = recorder.runId();
        received = {session.data().rounds(0).size(), session.data().rounds(1).size()};
        members = session.members();
        generation = session.generation();
    }  // the controller goes away without another commit

    core::RunStore store;
    QVERIFY2(store.open(storePath, core::RunStore::Mode::ReadWrite), qPrintable(store.errorString()));
    const auto crashed = store.loadRun(runId);
    QVERIFY2(crashed, qPrintable(store.errorString()));
    for (int w = 0; w < 2; ++w)
        QVERIFY(crashed->data.rounds(w).size() < received[w]);  // received, not stored
    core::RunSession session;
    core::RunRecorder recorder(&store);
    QSignalSpy finished(&session, &core::RunSession::finished);
    session.attach(crashed->data, cluster.endpoints(), secret, core::LocalCluster::kHost, rendezvous, members, generation);
    recorder.resume(runId, &session.data());
    recorder.attach(&session);
    QVERIFY(finished.wait(120000));
    QVERIFY2(finished.first().at(0).toBool(), qPrintable(finished.first().at(1).toString()));

    core::RunData stored;
    loadCompleteRun(store, runId, &stored);
    if (QTest::currentTestFailed())
        return;
    for (int w = 0; w < 2; ++w)
        QVERIFY(stored.rounds(w).size() > received[w]);
}

void TestLocalCluster::workersTrainOnTheirOwnFolders()
{
    // Non-iid by construction: worker 0 holds classes 0 and 1, worker 1
    // class 2 only; neither sees the other's data.
    QTemporaryDir tmp;
    const QList<test::OwnCsvData> data = {{{30, 20, 0}}, {{0, 0, 40}}};
    const QStringList dirs = {tmp.filePath("a"), tmp.filePath("b")};
    for (int w = 0; w < 2; ++w)
        data[w].write(dirs[w]);
    QString output;
    QVERIFY2(test::runCli({"run", "--config", test::writeClassNamesJob(tmp.path(), 3), "--workers", "2", "--data-dirs",
                           dirs.join(','), "--max-rounds", "20", "--batch-size", "8", "--out", tmp.filePath("run"),
                           "--store", tmp.filePath("runs.sqlite"), "--quiet"},
                          120000, &output),
             qPrintable(output));
    test::expectOwnData(tmp.filePath("run"), tmp.filePath("runs.sqlite"), data, dirs);
}
void TestLocalCluster::ownDataOfOtherClassesFailsClearly()
{
    // Without class_names a worker holding classes 0-2 builds a bigger
    // model than one holding 0-1: the run must say so, not crash.
    QTemporaryDir tmp;
    const QStringList dirs = {tmp.filePath("a"), tmp.filePath("b")};
    test::OwnCsvData{{10, 10}}.write(dirs[0]);
    test::OwnCsvData{{10, 10, 10}}.write(dirs[1]);
    QString output;
    QVERIFY(!test::runCli({"run", "--workers", "2", "--dataset", "csv", "--model", "mlp", "--data-dirs", dirs.join(','),
                           "--max-rounds", "20", "--out", tmp.filePath("run"), "--quiet"},
                          120000, &output));
    QVERIFY2(output.contains("parameters, worker 0's") && output.contains("set class_names"), qPrintable(output));
}
void TestLocalCluster::modelsThatCannotTakeTheSamplesFailClearly()
{
    QTemporaryDir tmp;
    test::OwnCsvData{{10, 10}}.write(tmp.path());
    QString output;
    // Tabular rows into a convolutional model.
    QVERIFY(!test::runCli({"run", "--workers", "1", "--dataset", "csv", "--data-dir", tmp.path(), "--model", "lenet5",
                           "--max-rounds", "5", "--out", tmp.filePath("run"), "--quiet"},
                          60000, &output));
    QVERIFY2(output.contains("needs images; tabular data (csv"), qPrintable(output));
    // 4x4 images (plain PGM) are too small for LeNet-5's 5x5 kernels.
    for (const char *split : {"train", "test"}) {
        QVERIFY(QDir().mkpath(tmp.filePath(QStringLiteral("img/%1/a").arg(split))));
        for (int i = 0; i < 12; ++i) {  // enough for one worker's partition
            QFile pgm(tmp.filePath(QStringLiteral("img/%1/a/%2.pgm").arg(split).arg(i)));
            QVERIFY(pgm.open(QIODevice::WriteOnly));
            pgm.write("P2\n4 4\n255\n0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n");
        }
    }
    QVERIFY(!test::runCli({"run", "--workers", "1", "--dataset", "imagefolder", "--data-dir", tmp.filePath("img"), "--model",
                           "lenet5", "--max-rounds", "5", "--out", tmp.filePath("run2"), "--quiet"},
                          60000, &output));
    QVERIFY2(output.contains("model \"lenet5\" cannot take samples of 1x4x4 from imagefolder data"), qPrintable(output));
}

QTEST_GUILESS_MAIN(TestLocalCluster)
void TestLocalCluster::strangerOnTheDataPlaneCannotJoinOrInject()
{
    // Once two workers train (Gaia: payloads through the mailbox), a
    // stranger without the run secret connects to every port the agents
    // listen on, the rendezvous store's included, and sends frames it made
    // up. The run goes on to its budget and the store logs the attempt.
    QVERIFY(!qEnvironmentVariable("DLION_CLI").isEmpty());
    QTemporaryDir out;
    QProcess p;
    QByteArray progress;
    QList<qint64> agents;
    test::startTrainingRun(p, {"run", "--workers", "2", "--dataset", "synthetic", "--model", "mlp", "--strategy", "gaia", "--seconds", "15",
                               "--eval-interval", "1", "--out", out.path()},
                           90000, &progress, &agents);
    if (QTest::currentTestFailed())
        return;
    QCOMPARE(agents.size(), 2);
    QList<quint16> ports;
    for (qint64 pid : agents)
        ports += test::listeningPorts(pid);
    QVERIFY2(ports.size() >= 3, qPrintable(QString("listening: %1 ports").arg(ports.size())));  // two agents and the store
    std::vector<std::unique_ptr<QTcpSocket>> stranger;
    for (quint16 port : ports) {
        for (const QByteArray &frame : {QByteArray::fromHex("00000010") + QByteArray(32, 'x'), QByteArray::fromHex("7fffffff") + QByteArray(64, 'y')}) {
            stranger.push_back(std::make_unique<QTcpSocket>());
            stranger.back()->connectToHost(QHostAddress::LocalHost, port);
            QVERIFY(stranger.back()->waitForConnected(5000));
            stranger.back()->write(frame);
            QVERIFY(stranger.back()->waitForBytesWritten(5000));
        }
    }
    QVERIFY(p.waitForFinished(120000));
    const QByteArray errors = p.readAllStandardError();
    progress += p.readAllStandardOutput();
    QVERIFY2(p.exitCode() == 0, errors.right(1500).constData());
    QVERIFY2(errors.contains("rendezvous store: rejected a connection from 127.0.0.1"), errors.right(1500).constData());
    QVERIFY2(progress.contains("run finished: final accuracy"), progress.right(800).constData());
    QFile f(QDir(out.path()).filePath("summary.json"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(f.readAll()).object();
    QVERIFY2(s.value("final_accuracy").toDouble() > 0.9, qPrintable(QString::number(s.value("final_accuracy").toDouble())));
}

#include "tst_local_cluster.moc"
