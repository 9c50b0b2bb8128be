// The experiment store on real SQLite files: round trip, a writer killed
// with SIGKILL, migration from schema v1, bad files, and reads that never
// modify the file.
#include "store_test_data.h"

#include <cluster_spec.h>
#include <dlion_version.h>
#include <round_series_codec.h>
#include <run_list_model.h>
#include <run_recorder.h>
#include <run_store.h>

#include <QCryptographicHash>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>
#include <QRandomGenerator>
#include <QSqlDatabase>
#include <QSqlError>
#include <QSqlQuery>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <functional>

#include <sys/resource.h>

using namespace dlion;
using core::RunStore;

namespace {

// A filter on one field (brace-initializing some fields trips -Wmissing-field-initializers).
core::RunFilter filter(QString core::RunFilter::*field, const char *value)
{
    core::RunFilter f;
    f.*field = QLatin1String(value);
    return f;
}

QString describe(const protocol::RoundRecord &r)
{
    return QString::fromUtf8(QJsonDocument(protocol::toJson(r)).toJson(QJsonDocument::Compact));
}

struct FileState {
    QByteArray hash;
    QDateTime mtime;
    qint64 size = -1;
    bool operator==(const FileState &o) const { return hash == o.hash && mtime == o.mtime && size == o.size; }
};

FileState fileState(const QString &path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return {QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256), QFileInfo(path).lastModified(), f.size()};
}

// Runs SQL on a file directly, outside RunStore (to build fixtures).
void rawSql(const QString &path, const QStringList &statements)
{
    const QString name = QStringLiteral("fixture-") + QString::number(QRandomGenerator::global()->generate());
    {
        QSqlDatabase db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), name);
        db.setDatabaseName(path);
        QVERIFY(db.open());
        QSqlQuery q(db);
        for (const QString &s : statements)
            QVERIFY2(q.exec(s), qPrintable(s + ": " + q.lastError().text()));
        q.finish();
        db.close();
    }
    QSqlDatabase::removeDatabase(name);
}

// A finished 3-worker run with every kind of record, values exact in float32.
void fillRun(core::RunData &data, int rounds)
{
    protocol::JobSpec job;
    job.strategy = QStringLiteral("dlion");
    job.dataset = QStringLiteral("synthetic");
    job.model = QStringLiteral("mlp");
    job.budget.seconds = 30;
    job.budget.targetAccuracy = 0.9;
    job.slowdown = {1, 2, 4};
    data.reset(job, 3);
    data.markStarted();
    protocol::TelemetryBatch b;
    for (int i = 0; i < rounds; ++i) {
        for (int w = 0; w < 3; ++w) {
            protocol::RoundRecord r = test::syntheticRound(w, i);
            r.linkMbps = {w == 0 ? 0.0 : 40.0, w == 1 ? 0.0 : 20.5, w == 2 ? 0.0 : 10.25};
            r.linkFraction = {w == 0 ? 0.0 : 1.0, w == 1 ? 0.0 : 0.125, w == 2 ? 0.0 : 0.0625};
            r.paramDigest = quint64(0x9e3779b97f4a7c15ULL * quint64(i + 1));
            b.rounds.append(r);
        }
        if (i % 25 == 0) {
            for (int w = 0; w < 3; ++w)
                b.evals.append({w, i, i / 64.0, 0.5 + i / 4000.0, 1.0 - i / 4000.0, 0.55 + i / 4000.0, 0.9, 3000, false, w == 0});
        }
        if (i % 100 == 50)
            b.merges.append({i, i / 64.0, 0, 2, 0.4, 0.6, 0.5, i == 150});
    }
    data.add(b);
    data.setOutcome(0, QCborMap{{QStringLiteral("ok"), true}, {QStringLiteral("rounds"), rounds}});
    data.setOutcome(1, QCborMap{{QStringLiteral("ok"), true}});
    data.setWorkerLost(2, QStringLiteral("connection reset"));
    data.markEnded(false, QStringLiteral("worker 2 lost: connection reset"));
}

// Rounds [from, to) of two workers, an evaluation every 16 and a merge every 64.
protocol::TelemetryBatch roundsBatch(qint64 from, qint64 to)
{
    protocol::TelemetryBatch b;
    for (qint64 i = from; i < to; ++i) {
        for (int w = 0; w < 2; ++w) {
            b.rounds.append(test::syntheticRound(w, i));
            if (i % 16 == 0)
                b.evals.append({w, i, i / 64.0, 0.5, 1.0, 0.5, 1.0, 100, false, w == 0});
        }
        if (i % 64 == 0)
            b.merges.append({i, i / 64.0, 0, 1, 0.4, 0.6, 0.5, false});
    }
    return b;
}

} // namespace

class TestRunStore : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void roundSeriesCodecKeepsEveryField();
    void writeReopenReadBackIdentically();
    void listSearchFilterTagNoteDelete();
    void killedWriterLeavesEveryCommittedRow();
    void fullDiskKeepsEveryCommittedRow();
    void migratesFromSchemaV1();
    void migratesClusterLayoutFromSchemaV3();
    void badFilesGetClearErrorsAndStayUntouched();
    void readingNeverModifiesTheFile();
    void oneHourEightWorkerRunStaysSmall();
    void replayedTelemetryIsRecordedOnce();
};

void TestRunStore::roundSeriesCodecKeepsEveryField()
{
    QList<protocol::RoundRecord> in;
    for (int i = 0; i < 300; ++i) {
        auto r = test::syntheticRound(1, 1000 + i);
        r.linkMbps.resize(i % 4);  // varying link counts
        r.paramDigest = i % 2 ? quint64(-1) - quint64(i) : 0;
        in.append(r);
    }
    QList<protocol::RoundRecord> out;
    QString error;
    QVERIFY2(core::roundseries::decode(core::roundseries::encode(in, 10, 290), 1, &out, &error), qPrintable(error));
    QCOMPARE(out.size(), 280);
    for (int i = 0; i < out.size(); ++i)
        QCOMPARE(describe(out[i]), describe(in[i + 10]));
    QVERIFY(!core::roundseries::decode(QByteArray("garbage"), 0, &out, &error));
    QVERIFY(error.contains(QLatin1String("malformed")));
}

void TestRunStore::writeReopenReadBackIdentically()
{
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("runs.sqlite"));
    core::RunData data;
    fillRun(data, 700);
    qint64 id = 0;
    {
        RunStore store;
        QVERIFY2(store.open(path, RunStore::Mode::ReadWrite), qPrintable(store.errorString()));
        core::RunRecorder recorder(&store);
        recorder.setCompactionRounds(256);
        recorder.setCluster(QJsonObject{{"kind", "local"}, {"workers", 3}});
        recorder.setOutDir(QStringLiteral("/tmp/run-x"));
        // Record it as it would arrive: a flush per slice of the series.
        core::RunData live;
        live.reset(data.job(), 3);
        QVERIFY(recorder.begin(&live));
        protocol::TelemetryBatch all;
        for (int w = 0; w < 3; ++w)
            all.rounds += data.rounds(w);
        all.evals = data.evals();
        all.merges = data.merges();
        for (int slice = 0; slice < 10; ++slice) {
            protocol::TelemetryBatch b;
            for (const auto &r : all.rounds)
                if (r.round >= slice * 70 && r.round < (slice + 1) * 70)
                    b.rounds.append(r);
            for (const auto &e : all.evals)
                if (e.round >= slice * 70 && e.round < (slice + 1) * 70)
                    b.evals.append(e);
            for (const auto &m : all.merges)
                if (m.round >= slice * 70 && m.round < (slice + 1) * 70)
                    b.merges.append(m);
            live.add(b);
            QVERIFY2(recorder.flush(), qPrintable(recorder.errorString()));
        }
        for (int w = 0; w < 3; ++w) {
            live.setOutcome(w, data.outcome(w));
            if (!data.lostReason(w).isEmpty())
                live.setWorkerLost(w, data.lostReason(w));
        }
        live.restoreTimes(data.startedAt(), data.endedAt(), data.ok(), data.message());
        QVERIFY(recorder.finish(false, data.message()));
        QVERIFY(recorder.finish(false, data.message()));  // idempotent
        id = recorder.runId();
        // 700 rounds, compaction every 256: 3 chunks per worker.
        QCOMPARE(store.countRows(QStringLiteral("round_chunks"), id), 9);
    }
    RunStore store;
    QVERIFY2(store.open(path, RunStore::Mode::ReadOnly), qPrintable(store.errorString()));
    const auto run = store.loadRun(id);
    QVERIFY2(run, qPrintable(store.errorString()));
    QCOMPARE(run->info.status, QStringLiteral("failed"));
    QCOMPARE(run->info.workers, 3);
    QCOMPARE(run->info.cluster.value("kind").toString(), QStringLiteral("local"));
    QCOMPARE(run->info.outDir, QStringLiteral("/tmp/run-x"));
    QVERIFY(run->info.codeVersion.startsWith(QStringLiteral(DLION_VERSION)));
    for (int w = 0; w < 3; ++w) {
        QCOMPARE(run->data.rounds(w).size(), data.rounds(w).size());
        for (qsizetype i = 0; i < data.rounds(w).size(); ++i)
            QCOMPARE(describe(run->data.rounds(w)[i]), describe(data.rounds(w)[i]));
    }
    // The whole summary.json, rebuilt from the store, is identical.
    const QJsonObject a = data.summary(), b = run->data.summary();
    for (auto it = a.begin(); it != a.end(); ++it)
        QVERIFY2(b.value(it.key()) == it.value(), qPrintable(it.key()));
    QCOMPARE(QJsonDocument(b).toJson(), QJsonDocument(a).toJson());
    QCOMPARE(run->summary().value("run").toObject().value("id").toInteger(), id);
}

void TestRunStore::listSearchFilterTagNoteDelete()
{
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("sub/dir/runs.sqlite"));  // folders are created
    RunStore store;
    QVERIFY2(store.open(path, RunStore::Mode::ReadWrite), qPrintable(store.errorString()));
    QList<qint64> ids;
    for (const char *strategy : {"allreduce", "dlion", "gaia", "dlion"}) {
        RunStore::NewRun r;
        r.strategy = QString::fromLatin1(strategy);
        r.model = QStringLiteral("lenet5");
        r.dataset = QStringLiteral("fashion-mnist");
        r.workers = 4;
        const auto id = store.createRun(r);
        QVERIFY(id);
        ids << *id;
    }
    QVERIFY(store.addTag(ids[1], QStringLiteral("paper")));
    QVERIFY(store.addTag(ids[1], QStringLiteral("paper")));  // once
    QVERIFY(store.addTag(ids[3], QStringLiteral("wan")));
    QVERIFY(store.addNote(ids[2], QStringLiteral("threshold 1% diverged")));
    QCOMPARE(store.listRuns().size(), 4);
    QCOMPARE(store.listRuns().first().id, ids[3]);  // newest first
    QCOMPARE(store.listRuns(filter(&core::RunFilter::strategy, "dlion")).size(), 2);
    QCOMPARE(store.listRuns(filter(&core::RunFilter::tag, "paper")).size(), 1);
    {
        core::RunFilter f;
        f.search = QStringLiteral("diverged");
        QCOMPARE(store.listRuns(f).size(), 1);
        QCOMPARE(store.listRuns(f).first().id, ids[2]);
        f.search = QStringLiteral("wan");
        QCOMPARE(store.listRuns(f).size(), 1);
        f = {};
        f.limit = 2;
        QCOMPARE(store.listRuns(f).size(), 2);
    }
    QCOMPARE(store.allTags(), (QStringList{"paper", "wan"}));
    QCOMPARE(*store.resolve(QStringLiteral("last")), ids[3]);
    QCOMPARE(*store.resolve(QStringLiteral("#%1").arg(ids[0])), ids[0]);
    QVERIFY(!store.resolve(QStringLiteral("999")));
    QCOMPARE(store.error(), RunStore::Error::UnknownRun);
    QVERIFY(store.errorString().contains(QLatin1String("dlion runs")));
    QVERIFY(store.removeTag(ids[1], QStringLiteral("paper")));
    QVERIFY(store.listRuns(filter(&core::RunFilter::tag, "paper")).isEmpty());
    QVERIFY(store.deleteRun(ids[2]));
    QCOMPARE(store.listRuns().size(), 3);
    QCOMPARE(store.countRows(QStringLiteral("notes")), 0);
    QVERIFY(!store.deleteRun(ids[2]));
    QCOMPARE(store.error(), RunStore::Error::UnknownRun);
    // A run whose writer is gone reads as interrupted.
    rawSql(path, {QStringLiteral("UPDATE runs SET writer_pid = 999999999 WHERE id = %1").arg(ids[0])});
    QCOMPARE(store.runInfo(ids[0])->status, QStringLiteral("interrupted"));
    QCOMPARE(store.runInfo(ids[1])->status, QStringLiteral("running"));  // this process is alive

    // The GUI's run list model over the same store.
    core::RunListModel model(&store);
    QVERIFY(model.refresh());
    QCOMPARE(model.rowCount(), 3);
    QCOMPARE(model.columnCount(), int(core::RunListModel::ColumnCount));
    QCOMPARE(model.runId(0), ids[3]);
    QCOMPARE(model.data(model.index(0, core::RunListModel::Strategy)).toString(), QStringLiteral("dlion"));
    QCOMPARE(model.data(model.index(0, core::RunListModel::Tags)).toString(), QStringLiteral("wan"));
    QCOMPARE(model.data(model.index(0, core::RunListModel::Workers), core::RunListModel::SortRole).toInt(), 4);
    QVERIFY(model.data(model.index(0, core::RunListModel::FinalAccuracy)).toString().endsWith(QLatin1Char('%')));
    QCOMPARE(model.headerData(0, Qt::Horizontal).toString(), QStringLiteral("Run"));
    core::RunFilter f;
    f.strategy = QStringLiteral("allreduce");
    QVERIFY(model.refresh(f));
    QCOMPARE(model.rowCount(), 1);
    QCOMPARE(model.rowOf(ids[0]), 0);
}

namespace {

// Reads store_writer's lines until `done` says so or a minute passes;
// returns the rounds per worker of its last commit.
qint64 followWriter(QProcess &writer, const std::function<bool(int commits, qint64 rounds, const QByteArray &failure)> &done)
{
    qint64 lastRounds = 0;
    int commits = 0;
    QByteArray pending, failure;
    QElapsedTimer clock;
    clock.start();
    while (!done(commits, lastRounds, failure) && clock.elapsed() < 60000) {
        writer.waitForReadyRead(1000);
        pending += writer.readAllStandardOutput();
        qsizetype nl;
        while ((nl = pending.indexOf('\n')) >= 0) {
            const QByteArray line = pending.left(nl);
            pending.remove(0, nl + 1);
            const QList<QByteArray> f = line.split(' ');
            if (f.size() == 4 && f[0] == "committed") {
                lastRounds = f[1].toLongLong();
                ++commits;
            } else if (line.startsWith("failed ")) {
                failure = line.mid(7);
            }
        }
    }
    return lastRounds;
}

// The killed writer's run holds every row it committed, intact.
void verifyInterruptedRun(const QString &path, qint64 lastRounds)
{
    RunStore store;
    QVERIFY2(store.open(path, RunStore::Mode::ReadOnly), qPrintable(store.errorString()));
    const auto run = store.loadRun(1);
    QVERIFY2(run, qPrintable(store.errorString()));
    QCOMPARE(run->info.status, QStringLiteral("interrupted"));
    const qsizetype n = run->data.rounds(0).size();
    QVERIFY2(n >= lastRounds, qPrintable(QStringLiteral("%1 rounds stored, %2 committed").arg(n).arg(lastRounds)));
    QCOMPARE(run->data.rounds(1).size(), n);  // both workers from the same commit
    for (int w = 0; w < 2; ++w) {
        for (qsizetype i = 0; i < n; ++i)
            QCOMPARE(describe(run->data.rounds(w)[i]), describe(test::syntheticRound(w, i)));
    }
    QCOMPARE(run->data.evals().size(), (n + 15) / 16);
    QCOMPARE(run->data.merges().size(), (n + 63) / 64);
    // And SQLite agrees the file is sound.
    {
        QSqlDatabase db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), QStringLiteral("check"));
        db.setDatabaseName(path);
        db.setConnectOptions(QStringLiteral("QSQLITE_OPEN_READONLY"));
        QVERIFY(db.open());
        QSqlQuery q(db);
        QVERIFY(q.exec(QStringLiteral("PRAGMA integrity_check")) && q.next());
        QCOMPARE(q.value(0).toString(), QStringLiteral("ok"));
        q.finish();
        db.close();
    }
    QSqlDatabase::removeDatabase(QStringLiteral("check"));
}

} // namespace

void TestRunStore::killedWriterLeavesEveryCommittedRow()
{
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("runs.sqlite"));
    QProcess writer;
    writer.setProcessChannelMode(QProcess::SeparateChannels);
    writer.start(QStringLiteral(DLION_STORE_WRITER), {path, QStringLiteral("40")});
    QVERIFY2(writer.waitForStarted(), qPrintable(writer.errorString()));
    // Past at least one compaction (every 200 rounds) and a dozen commits.
    int commits = 0;
    const qint64 lastRounds = followWriter(writer, [&commits](int c, qint64 rounds, const QByteArray &) {
        commits = c;
        return c >= 12 && rounds > 250;
    });
    QVERIFY2(commits >= 12, qPrintable(QString::fromLocal8Bit(writer.readAllStandardError())));
    QVERIFY(lastRounds > 250);
    ::kill(pid_t(writer.processId()), SIGKILL);  // mid-run, no chance to clean up
    QVERIFY(writer.waitForFinished(10000));
    QCOMPARE(writer.exitStatus(), QProcess::CrashExit);
    verifyInterruptedRun(path, lastRounds);
}

void TestRunStore::fullDiskKeepsEveryCommittedRow()
{
    // The writer may not grow any file past 512 KiB (RLIMIT_FSIZE): to
    // SQLite that is a full disk, without needing a small file system.
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("runs.sqlite"));
    QProcess writer;
    writer.setProcessChannelMode(QProcess::SeparateChannels);
    writer.setChildProcessModifier([] {
        const rlimit limit{512 * 1024, 512 * 1024};
        ::setrlimit(RLIMIT_FSIZE, &limit);
        ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails instead of killing
    });
    writer.start(QStringLiteral(DLION_STORE_WRITER), {path, QStringLiteral("40")});
    QVERIFY2(writer.waitForStarted(), qPrintable(writer.errorString()));
    QByteArray failure;
    const qint64 lastRounds = followWriter(writer, [&failure](int, qint64, const QByteArray &f) {
        failure = f;
        return !f.isEmpty();
    });
    QVERIFY2(!failure.isEmpty(), "the store never filled up");
    qInfo("recording failed after %lld rounds per worker: %s", lastRounds, failure.constData());
    QVERIFY2(failure.contains("the disk is full or failing") && failure.contains("free some space"), failure.constData());
    // The writer stays up (a run would go on training); then it dies mid-run.
    QVERIFY(!writer.waitForFinished(1000));
    ::kill(pid_t(writer.processId()), SIGKILL);
    QVERIFY(writer.waitForFinished(10000));
    verifyInterruptedRun(path, lastRounds);
}

void TestRunStore::migratesFromSchemaV1()
{
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("v1.sqlite"));
    protocol::JobSpec job;
    job.strategy = QStringLiteral("gaia");
    job.budget.seconds = 60;
    const QString spec = QString::fromUtf8(QJsonDocument(job.toJson()).toJson(QJsonDocument::Compact)).replace("'", "''");
    QStringList sql = {
        "CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, created_at TEXT NOT NULL, status TEXT NOT NULL,"
        " strategy TEXT, model TEXT, dataset TEXT, workers INTEGER, spec_json TEXT NOT NULL, final_accuracy REAL,"
        " train_s REAL, bytes_sent INTEGER)",
        "CREATE TABLE rounds (run_id INTEGER NOT NULL, worker INTEGER NOT NULL, round INTEGER NOT NULL, t REAL,"
        " batch INTEGER, share REAL, rate REAL, loss REAL, bytes_sent INTEGER, PRIMARY KEY (run_id, worker, round))",
        "CREATE TABLE evals (run_id INTEGER NOT NULL, worker INTEGER, round INTEGER, t REAL, accuracy REAL, loss REAL,"
        " global_accuracy REAL, global_loss REAL)",
        "CREATE TABLE merges (run_id INTEGER NOT NULL, round INTEGER, t REAL, from_worker INTEGER, to_worker INTEGER,"
        " alpha REAL)",
        "CREATE TABLE notes (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id INTEGER NOT NULL, created_at TEXT, text TEXT)",
        "CREATE TABLE tags (run_id INTEGER NOT NULL, tag TEXT NOT NULL, PRIMARY KEY (run_id, tag))",
        "INSERT INTO runs VALUES (1, '2024-05-01T10:00:00.000Z', 'finished', 'gaia', 'lenet5', 'fashion-mnist', 2, '"
            + spec + "', 0.81, 50, 123456)",
        "INSERT INTO evals VALUES (1, 0, 100, 25, 0.7, 0.9, 0.72, 0.8)",
        "INSERT INTO evals VALUES (1, 0, 199, 50, 0.8, 0.6, 0.81, 0.55)",
        "INSERT INTO merges VALUES (1, 150, 37.5, 0, 1, 0.5)",
        "INSERT INTO notes (run_id, created_at, text) VALUES (1, '2024-05-01T11:00:00.000Z', 'baseline for fig. 3')",
        "INSERT INTO tags VALUES (1, 'paper')",
        "PRAGMA user_version = 1",
    };
    for (int w = 0; w < 2; ++w) {
        for (int i = 0; i < 200; ++i)
            sql << QStringLiteral("INSERT INTO rounds VALUES (1, %1, %2, %3, 32, 0.5, %4, %5, 1000)")
                       .arg(w).arg(i).arg(i * 0.25).arg(1000 + i).arg(2.0 - i / 128.0);
    }
    rawSql(path, sql);
    const FileState before = fileState(path);

    auto check = [](RunStore &store) {
        const auto run = store.loadRun(1);
        QVERIFY2(run, qPrintable(store.errorString()));
        QCOMPARE(run->info.strategy, QStringLiteral("gaia"));
        QCOMPARE(run->info.tags, QStringList{QStringLiteral("paper")});
        QCOMPARE(run->info.notes.size(), 1);
        QCOMPARE(run->info.merges, 1);
        QCOMPARE(run->data.job().strategy, QStringLiteral("gaia"));
        QCOMPARE(run->data.rounds(1).size(), 200);
        QCOMPARE(run->data.rounds(1)[199].rate, 1199.0);
        QCOMPARE(run->data.rounds(1)[199].t, 49.75);
        QCOMPARE(run->data.lastGlobalEval()->globalAccuracy, 0.81);
        QCOMPARE(*run->data.timeToAccuracy(0.8), 50.0);
        QCOMPARE(run->info.samplesPerS, 2 * 200 * 32 / 50.0);
    };
    {
        // A reader sees the run through a migrated copy; the file stays v1.
        RunStore store;
        QVERIFY2(store.open(path, RunStore::Mode::ReadOnly), qPrintable(store.errorString()));
        QCOMPARE(store.diskSchemaVersion(), 1);
        check(store);
        QVERIFY(!store.addTag(1, QStringLiteral("x")));
    }
    QVERIFY(fileState(path) == before);
    {
        RunStore store;
        QVERIFY2(store.open(path, RunStore::Mode::ReadWrite), qPrintable(store.errorString()));
        QCOMPARE(store.diskSchemaVersion(), 1);
        check(store);
    }
    RunStore store;
    QVERIFY(store.open(path, RunStore::Mode::ReadOnly));
    QCOMPARE(store.diskSchemaVersion(), RunStore::kSchemaVersion);
    check(store);
    QCOMPARE(store.countRows(QStringLiteral("round_chunks")), 2);
}

void TestRunStore::migratesClusterLayoutFromSchemaV3()
{
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("v3.sqlite"));
    core::ClusterSpec spec;
    spec.name = QStringLiteral("lab");
    core::ClusterHost host;
    host.name = QStringLiteral("edge-1");
    host.address = QStringLiteral("10.0.0.5");
    host.user = QStringLiteral("alice");
    spec.hosts = {host};
    const QJsonObject cliSsh = core::sshClusterInfo(spec, dir.filePath(QStringLiteral("lab.yaml")));
    QCOMPARE(cliSsh.value("workers").toInt(), 1);
    QVERIFY(!core::sshClusterInfo(spec, QString()).contains("file"));  // hosts typed into the GUI
    const QJsonObject cliLocal = core::localClusterInfo(2);
    // As DLion Studio wrote them up to v3.
    const QJsonObject guiSsh{{"kind", "ssh"}, {"workers", 2}, {"hosts", QJsonArray{"edge-1", "edge-2"}}};
    const QJsonObject guiLocal{{"kind", "local"}, {"workers", 3}, {"emulation", QJsonObject{{"links", "lan"}}}};
    {
        RunStore store;
        QVERIFY(store.open(path, RunStore::Mode::ReadWrite));
        RunStore::NewRun run;
        run.spec = protocol::JobSpec().toJson();
        for (const QJsonObject &cluster : {guiSsh, guiLocal, cliSsh, cliLocal}) {
            run.cluster = cluster;
            QVERIFY(store.createRun(run));
        }
    }
    rawSql(path, {QStringLiteral("PRAGMA user_version = 3")});

    RunStore store;
    QVERIFY2(store.open(path, RunStore::Mode::ReadWrite), qPrintable(store.errorString()));
    QCOMPARE(store.diskSchemaVersion(), 3);
    auto cluster = [&store](qint64 id) { return store.loadRun(id)->info.cluster; };
    const QJsonArray names{QJsonObject{{"name", "edge-1"}}, QJsonObject{{"name", "edge-2"}}};
    QCOMPARE(cluster(1), (QJsonObject{{"kind", "ssh"}, {"workers", 2}, {"hosts", names}}));
    QCOMPARE(cluster(2), (QJsonObject{{"kind", "local"}, {"workers", 3}, {"host", store.loadRun(2)->info.host}}));
    QCOMPARE(cluster(3), cliSsh);
    QCOMPARE(cluster(4), cliLocal);
    RunStore reopened;
    QVERIFY(reopened.open(path, RunStore::Mode::ReadOnly));
    QCOMPARE(reopened.diskSchemaVersion(), RunStore::kSchemaVersion);
}

void TestRunStore::badFilesGetClearErrorsAndStayUntouched()
{
    QTemporaryDir dir;
    RunStore store;
    // Missing: a reader does not create it.
    const QString missing = dir.filePath(QStringLiteral("none.sqlite"));
    QVERIFY(!store.open(missing, RunStore::Mode::ReadOnly));
    QCOMPARE(store.error(), RunStore::Error::Missing);
    QVERIFY(store.errorString().contains(missing));
    QVERIFY(!QFile::exists(missing));

    // Garbage.
    const QString garbage = dir.filePath(QStringLiteral("garbage.sqlite"));
    {
        QFile f(garbage);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray(8192, 'x'));
    }
    const FileState g = fileState(garbage);
    for (auto mode : {RunStore::Mode::ReadOnly, RunStore::Mode::ReadWrite}) {
        QVERIFY(!store.open(garbage, mode));
        QCOMPARE(store.error(), RunStore::Error::Corrupt);
        QVERIFY(store.errorString().contains(garbage));
        QVERIFY(store.errorString().contains(QLatin1String("not modified")));
    }
    QVERIFY(fileState(garbage) == g);

    // Another program's SQLite file.
    const QString other = dir.filePath(QStringLiteral("other.sqlite"));
    rawSql(other, {QStringLiteral("CREATE TABLE photos (id INTEGER)")});
    const FileState o = fileState(other);
    QVERIFY(!store.open(other, RunStore::Mode::ReadWrite));
    QCOMPARE(store.error(), RunStore::Error::Corrupt);
    QVERIFY(store.errorString().contains(QLatin1String("not a run store")));
    QVERIFY(fileState(other) == o);

    // Newer schema.
    const QString newer = dir.filePath(QStringLiteral("newer.sqlite"));
    rawSql(newer, {QStringLiteral("CREATE TABLE runs (id INTEGER)"), QStringLiteral("PRAGMA user_version = 99")});
    QVERIFY(!store.open(newer, RunStore::Mode::ReadWrite));
    QCOMPARE(store.error(), RunStore::Error::NewerSchema);

    // A real store cut in half: the header is fine, the pages are not.
    const QString cut = dir.filePath(QStringLiteral("cut.sqlite"));
    {
        RunStore w;
        QVERIFY(w.open(cut, RunStore::Mode::ReadWrite));
        core::RunData data;
        fillRun(data, 2000);
        core::RunRecorder rec(&w);
        QVERIFY(rec.begin(&data));
        QVERIFY(rec.finish(true, {}));
    }
    QVERIFY(QFileInfo(cut).size() > 16384);
    QVERIFY(QFile::resize(cut, QFileInfo(cut).size() / 2));
    const FileState c = fileState(cut);
    const bool opened = store.open(cut, RunStore::Mode::ReadOnly);
    if (opened)
        QVERIFY(!store.loadRun(1));
    QCOMPARE(store.error(), RunStore::Error::Corrupt);
    QVERIFY2(store.errorString().contains(QLatin1String("not modified")), qPrintable(store.errorString()));
    store.close();
    QVERIFY(fileState(cut) == c);

    // Unwritable place for a writer.
    QVERIFY(!store.open(QStringLiteral("/proc/dlion-no/runs.sqlite"), RunStore::Mode::ReadWrite));
    QCOMPARE(store.error(), RunStore::Error::Unopenable);
    QVERIFY(store.errorString().contains(QLatin1String("/proc/dlion-no")));
}

void TestRunStore::readingNeverModifiesTheFile()
{
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("runs.sqlite"));
    {
        RunStore w;
        QVERIFY(w.open(path, RunStore::Mode::ReadWrite));
        core::RunData data;
        fillRun(data, 300);
        core::RunRecorder rec(&w);
        QVERIFY(rec.begin(&data));
        QVERIFY(rec.finish(true, {}));
        QVERIFY(w.addTag(rec.runId(), QStringLiteral("t")));
    }
    const FileState main = fileState(path);
    const FileState wal = fileState(path + "-wal");
    QTest::qWait(1100);  // an mtime change would be visible
    for (int k = 0; k < 2; ++k) {
        RunStore r;
        QVERIFY2(r.open(path, RunStore::Mode::ReadOnly), qPrintable(r.errorString()));
        QCOMPARE(r.listRuns().size(), 1);
        QVERIFY(r.loadRun(*r.resolve(QStringLiteral("last"))));
        QVERIFY(!r.loadRun(42));
        QVERIFY(!r.addNote(1, QStringLiteral("no")));  // read-only
    }
    QVERIFY(fileState(path) == main);
    if (wal.size > 0)
        QVERIFY(fileState(path + "-wal") == wal);
}

void TestRunStore::oneHourEightWorkerRunStaysSmall()
{
    // 1 hour, 8 workers, 30 rounds/s each, with noisy rates, links and
    // fractions (the DLion strategy's worst case for compression).
    const int workers = 8, perSecond = 30, seconds = qEnvironmentVariableIntValue("DLION_STORE_SIZE_SECONDS") > 0
        ? qEnvironmentVariableIntValue("DLION_STORE_SIZE_SECONDS") : 3600;
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("big.sqlite"));
    RunStore store;
    QVERIFY(store.open(path, RunStore::Mode::ReadWrite));
    protocol::JobSpec job;
    job.strategy = QStringLiteral("dlion");
    job.budget.seconds = seconds;
    core::RunData data;
    data.reset(job, workers);
    data.markStarted();
    core::RunRecorder rec(&store);
    QVERIFY(rec.begin(&data));
    QRandomGenerator rng(7);
    std::vector<double> bw(workers * workers, 40.0);
    qint64 round = 0;
    for (int s = 0; s < seconds; ++s) {
        protocol::TelemetryBatch b;
        for (int k = 0; k < perSecond; ++k, ++round) {
            for (int w = 0; w < workers; ++w) {
                protocol::RoundRecord r;
                r.worker = w;
                r.round = round;
                r.t = s + (k + rng.generateDouble() * 0.1) / perSecond;
                r.rate = 800.0 / (1 + w % 4) * (0.95 + 0.1 * rng.generateDouble());
                r.batch = int(r.rate / 25);
                r.share = r.batch / 256.0;
                r.computeS = 0.02 * (0.9 + 0.2 * rng.generateDouble());
                r.commS = 0.01 * (0.9 + 0.2 * rng.generateDouble());
                r.loss = 2.3 * std::exp(-r.t / 600) + 0.05 * rng.generateDouble();
                r.slowdown = 1 + w % 4;
                r.bytesSent = 20000 + rng.bounded(5000);
                r.linkMbps.resize(workers);
                r.linkFraction.resize(workers);
                for (int j = 0; j < workers; ++j) {
                    double &x = bw[w * workers + j];
                    x = std::clamp(x * (0.98 + 0.04 * rng.generateDouble()), 5.0, 800.0);
                    r.linkMbps[j] = j == w ? 0 : x;
                    r.linkFraction[j] = j == w ? 0 : std::min(1.0, x / 400.0);
                }
                b.rounds.append(r);
            }
        }
        if (s % 2 == 0) {
            for (int w = 0; w < workers; ++w)
                b.evals.append({w, round, double(s), 0.8, 0.5, 0.8, 0.5, 1250, false, w == 0});
        }
        data.add(b);
        QVERIFY(rec.flush());
    }
    QVERIFY(rec.finish(true, {}));
    store.close();
    const qint64 bytes = QFileInfo(path).size() + QFileInfo(path + "-wal").size();
    const double perRound = double(bytes) / double(round * workers);
    const double hourMb = perRound * 3600.0 * perSecond * workers / 1e6;
    qInfo("store size: %.1f MB for %d s x %d workers x %d rounds/s (%.1f bytes per worker-round; 1 hour = %.1f MB)",
          bytes / 1e6, seconds, workers, perSecond, perRound, hourMb);
    QVERIFY2(hourMb < 60, qPrintable(QString::number(hourMb)));
}

void TestRunStore::replayedTelemetryIsRecordedOnce()
{
    // A controller stored rounds 0-99, received 100-149 and died before its
    // next commit; the agents re-send 80-149 (unacknowledged) and go on.
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("runs.sqlite"));
    protocol::JobSpec job;
    job.model = QStringLiteral("mlp");
    RunStore store;
    QVERIFY2(store.open(path, RunStore::Mode::ReadWrite), qPrintable(store.errorString()));
    qint64 id = 0;
    {
        core::RunData crashed;
        crashed.reset(job, 2);
        core::RunRecorder recorder(&store);
        QVERIFY(recorder.begin(&crashed));
        crashed.add(roundsBatch(0, 100));
        QVERIFY(recorder.flush());
        crashed.add(roundsBatch(100, 150));
        id = recorder.runId();
    }
    auto stored = store.loadRun(id);
    QVERIFY2(stored, qPrintable(store.errorString()));
    QCOMPARE(stored->data.rounds(0).size(), 100);
    core::RunData data = stored->data;
    data.expectResends();  // as RunSession::attach does
    core::RunRecorder recorder(&store);
    recorder.resume(id, &data);
    data.add(roundsBatch(80, 150));
    data.add(roundsBatch(150, 200));
    QVERIFY(recorder.finish(true, QString()));

    const auto run = store.loadRun(id);
    QVERIFY2(run, qPrintable(store.errorString()));
    for (int w = 0; w < 2; ++w) {
        QCOMPARE(run->data.rounds(w).size(), 200);
        for (qsizetype i = 0; i < 200; ++i)
            QCOMPARE(describe(run->data.rounds(w)[i]), describe(test::syntheticRound(w, i)));
    }
    QCOMPARE(run->data.evals().size(), 2 * 13);  // rounds 0, 16, ..., 192 of each worker
    QCOMPARE(run->data.merges().size(), 4);      // rounds 0, 64, 128, 192
}

QTEST_GUILESS_MAIN(TestRunStore)
#include "tst_run_store.moc"
