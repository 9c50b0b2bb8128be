// Checkpoints on real dlion-agent processes: periodic files that rotate and
// load back bit-identical, a run resumed from them, and a checkpoint
// directory that stops being writable mid-run. Also the private, atomic
// writes checkpoints share with attach.json: no planted link followed, 0600,
// and a failed write that keeps the previous file.
#include "cluster_fixture.h"

#include <attach_file.h>
#include <checkpoint.h>
#include <engine_error.h>
#include <python_torch.h>
#include <safe_file.h>

#include <QDir>
#include <QTemporaryDir>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <sys/resource.h>
#include <sys/stat.h>

using namespace dlion;

namespace {

protocol::JobSpec checkpointJob(const QString &dir, double seconds)
{
    protocol::JobSpec job;
    job.model = "mlp";
    job.dataset = "fashion-mnist";
    job.batchSize = 32;
    job.evalIntervalS = 1.0;
    job.evalSamples = 2000;
    job.budget.seconds = seconds;
    job.checkpoint = {dir, 0.5, 2};
    return job;
}

QStringList checkpointsOf(const QString &dir, int worker)
{
    return QDir(dir).entryList({QStringLiteral("worker-%1-round-*.ckpt").arg(worker)}, QDir::Files, QDir::Name);
}

// Trainer::parameterDigest over a checkpoint's parameters.
quint64 digest(const std::vector<float> &params)
{
    const auto *p = reinterpret_cast<const unsigned char *>(params.data());
    quint64 h = 1469598103934665603ull;
    for (std::size_t i = 0; i < params.size() * sizeof(float); ++i)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

QString loadError(const QString &path)
{
    try {
        engine::Checkpoint::load(path);
    } catch (const engine::EngineError &e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

QByteArray contentOf(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

int modeOf(const QString &path)
{
    struct stat st {};
    return ::lstat(QFile::encodeName(path).constData(), &st) == 0 ? int(st.st_mode & 07777) : -1;
}

core::AttachFile attachFile(int generation)
{
    core::AttachFile a;
    a.runId = 1;
    a.store = QStringLiteral("/runs.sqlite");
    a.agents = {{QStringLiteral("127.0.0.1"), 7070}};
    a.secret = QByteArrayLiteral("run secret");
    a.members = {0};
    a.generation = generation;
    return a;
}

double firstGlobalAccuracy(const core::RunData &d)
{
    for (const auto &e : d.evals()) {
        if (e.primary)
            return e.globalAccuracy;
    }
    return 0;
}

} // namespace

class TestCheckpoints : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void checkpointsRotateAndLoadBack();
    void resumedRunContinuesFromCheckpoint();
    void unwritableDirectoryWarnsAndTrainingGoesOn();
    void privateFilesFollowNoPlantedLink();
    void failedWriteKeepsThePreviousFile();
    void batchNormStatisticsResume();
    void checkpointExportsForPytorch();
};

void TestCheckpoints::checkpointsRotateAndLoadBack()
{
    QTemporaryDir tmp;
    const QString dir = tmp.filePath("ckpt");
    protocol::JobSpec job = checkpointJob(dir, 5);
    job.verifyReplicas = true;
    test::LocalRun run;
    QVERIFY(run.start(job, 2));
    QVERIFY(run.waitFinished(60000));
    QVERIFY2(run.ok, qPrintable(run.message));

    for (int w = 0; w < 2; ++w) {
        const QStringList files = checkpointsOf(dir, w);
        QCOMPARE(files.size(), 2);  // keep = 2 of about ten written
        for (const QString &f : files) {
            const engine::Checkpoint c = engine::Checkpoint::load(QDir(dir).filePath(f));
            QCOMPARE(c.worker, w);
            QCOMPARE(c.model, QString("mlp"));
            QVERIFY(c.round > 0);
            QCOMPARE(c.momentum.size(), c.params.size());
            // Written after round c.round - 1: its digest is that round's.
            const auto &rounds = run.session->data().rounds(w);
            const auto it = std::find_if(rounds.begin(), rounds.end(), [&](const auto &r) { return r.round == c.round - 1; });
            QVERIFY(it != rounds.end());
            QCOMPARE(digest(c.params), it->paramDigest);
        }
    }
    QVERIFY(engine::Checkpoint::load(QDir(dir).filePath(checkpointsOf(dir, 0).last())).round
            > engine::Checkpoint::load(QDir(dir).filePath(checkpointsOf(dir, 0).first())).round);

    // A truncated and a corrupted copy are refused with their file named.
    const QString source = QDir(dir).filePath(checkpointsOf(dir, 0).last());
    const QString truncated = tmp.filePath("truncated.ckpt");
    const QString corrupted = tmp.filePath("corrupted.ckpt");
    QVERIFY(QFile::copy(source, truncated) && QFile::copy(source, corrupted));
    QVERIFY(QFile::resize(truncated, QFileInfo(source).size() / 2));
    QFile f(corrupted);
    QVERIFY(f.open(QIODevice::ReadWrite));
    QVERIFY(f.seek(f.size() / 2));
    const char flipped = char(f.peek(1).at(0) ^ 0x5a);
    QVERIFY(f.write(&flipped, 1) == 1);
    f.close();
    const QString shortError = loadError(truncated);
    QVERIFY2(shortError.contains(truncated) && shortError.contains("truncated"), qPrintable(shortError));
    const QString crcError = loadError(corrupted);
    QVERIFY2(crcError.contains(corrupted) && crcError.contains("CRC"), qPrintable(crcError));
    QVERIFY(loadError(source).isEmpty());
}

void TestCheckpoints::resumedRunContinuesFromCheckpoint()
{
    QTemporaryDir tmp;
    const QString dir = tmp.filePath("ckpt");
    double accuracyBefore = 0;
    {
        test::LocalRun first;
        QVERIFY(first.start(checkpointJob(dir, 8), 2));
        QVERIFY(first.waitFinished(60000));
        QVERIFY2(first.ok, qPrintable(first.message));
        accuracyBefore = first.session->data().lastGlobalEval()->globalAccuracy;
    }
    QVERIFY2(accuracyBefore > 0.6, qPrintable(QString::number(accuracyBefore)));
    const engine::Checkpoint c = engine::Checkpoint::load(QDir(dir).filePath(checkpointsOf(dir, 0).last()));
    QVERIFY(c.round > 0);

    protocol::JobSpec job = checkpointJob(tmp.filePath("ckpt2"), 0);
    job.resumeFrom = dir;
    job.budget.seconds = c.elapsedS + 3;  // the budget counts the checkpoint's time too
    test::LocalRun resumed;
    QVERIFY(resumed.start(job, 2));
    QVERIFY(resumed.waitFinished(60000));
    QVERIFY2(resumed.ok, qPrintable(resumed.message));
    const core::RunData &d = resumed.session->data();
    for (int w = 0; w < 2; ++w) {
        QVERIFY(!d.rounds(w).isEmpty());
        QCOMPARE(d.rounds(w).first().round, c.round);  // worker 0 is the source
        QVERIFY(d.rounds(w).first().t >= c.elapsedS);
    }
    // A fresh model scores about 10%; the resumed one starts where it stopped.
    const double accuracyAfter = firstGlobalAccuracy(d);
    qInfo("resumed at round %lld (t %.1f s): accuracy %.3f before the stop, %.3f at the first eval", qlonglong(c.round),
          c.elapsedS, accuracyBefore, accuracyAfter);
    QVERIFY2(accuracyAfter > 0.6 && std::abs(accuracyAfter - accuracyBefore) < 0.1,
             qPrintable(QStringLiteral("before %1, first eval after %2").arg(accuracyBefore).arg(accuracyAfter)));
}

void TestCheckpoints::unwritableDirectoryWarnsAndTrainingGoesOn()
{
    // Permissions do not stop root: the directory is replaced by a regular
    // file, which no one can create a checkpoint under.
    QTemporaryDir tmp;
    const QString dir = tmp.filePath("ckpt");
    test::LocalRun run;
    QStringList log;
    QObject::connect(run.session.get(), &core::RunSession::logMessage, [&](const QString &m) { log.append(m); });
    QVERIFY(run.start(checkpointJob(dir, 6), 2));
    QTRY_VERIFY_WITH_TIMEOUT(checkpointsOf(dir, 0).size() == 2 && checkpointsOf(dir, 1).size() == 2, 60000);
    const QString kept = tmp.filePath("kept");
    QVERIFY(QDir().rename(dir, kept));
    QFile blocker(dir);
    QVERIFY(blocker.open(QIODevice::WriteOnly));
    blocker.close();
    const qint64 roundAtBlock = run.session->data().lastRound(0)->round;

    // A save caught mid-write fails at its rename; later ones at the directory.
    QTRY_COMPARE_WITH_TIMEOUT(log.filter("warning:").size(), 2, 30000);
    for (const QString &m : log.filter("warning:"))
        QVERIFY2(m.contains("checkpoint") && m.contains(dir) && m.contains("training goes on"), qPrintable(m));
    QVERIFY(run.waitFinished(60000));
    QVERIFY2(run.ok, qPrintable(run.message));
    QVERIFY(run.session->data().lastRound(0)->round > roundAtBlock + 20);
    // Each worker warned once, not once per interval.
    QCOMPARE(log.filter("warning:").size(), 2);
    QVERIFY(log.filter("worker 0: warning:").size() == 1 && log.filter("worker 1: warning:").size() == 1);
    for (int w = 0; w < 2; ++w) {
        for (const QString &f : checkpointsOf(kept, w))
            QCOMPARE(loadError(QDir(kept).filePath(f)), QString());
    }
}

void TestCheckpoints::privateFilesFollowNoPlantedLink()
{
    QTemporaryDir tmp;
    const QString victim = tmp.filePath("victim");
    QFile v(victim);
    QVERIFY(v.open(QIODevice::WriteOnly) && v.write("precious") == 8);
    v.close();
    // Links to another file at the old fixed temporary name and at the targets.
    const QString dir = tmp.filePath("ckpt");
    QVERIFY(QDir().mkpath(dir));
    const QString checkpoint = QDir(dir).filePath(engine::Checkpointer::fileName(0, 7));
    const QString attach = core::AttachFile::pathIn(tmp.path());
    for (const QString &link : {QDir(dir).filePath(".worker-0.ckpt.tmp"), checkpoint, attach})
        QVERIFY(QFile::link(victim, link));

    const mode_t umaskBefore = ::umask(022);
    engine::Checkpoint c;
    c.model = QStringLiteral("mlp");
    c.round = 7;
    c.params = {1, 2, 3};
    c.momentum = {0, 0, 0};
    const QString checkpointError = engine::Checkpointer(dir, 0, 2).save(c);
    QString attachError;
    const bool attachWritten = attachFile(1).write(tmp.path(), &attachError);
    ::umask(umaskBefore);

    QVERIFY2(checkpointError.isEmpty(), qPrintable(checkpointError));
    QVERIFY2(attachWritten, qPrintable(attachError));
    QCOMPARE(contentOf(victim), QByteArray("precious"));
    for (const QString &written : {checkpoint, attach}) {
        QVERIFY2(!QFileInfo(written).isSymLink(), qPrintable(written));
        QCOMPARE(modeOf(written), 0600);  // owner-only despite umask 022
    }
    QCOMPARE(engine::Checkpoint::load(checkpoint).round, std::int64_t(7));
    QString readError;
    const auto back = core::AttachFile::read(tmp.path(), &readError);
    QVERIFY2(back && back->secret == "run secret", qPrintable(readError));
}

void TestCheckpoints::failedWriteKeepsThePreviousFile()
{
    QTemporaryDir tmp;
    QString error;
    QVERIFY2(attachFile(1).write(tmp.path(), &error), qPrintable(error));
    // Permissions do not stop root: a file-size limit makes the write itself
    // fail (EFBIG once SIGXFSZ is ignored).
    rlimit before {};
    QVERIFY(::getrlimit(RLIMIT_FSIZE, &before) == 0);
    rlimit tiny = before;
    tiny.rlim_cur = 16;
    const auto previousHandler = std::signal(SIGXFSZ, SIG_IGN);
    QVERIFY(::setrlimit(RLIMIT_FSIZE, &tiny) == 0);
    const bool written = attachFile(2).write(tmp.path(), &error);
    ::setrlimit(RLIMIT_FSIZE, &before);
    std::signal(SIGXFSZ, previousHandler);

    QVERIFY(!written);
    const QString path = core::AttachFile::pathIn(tmp.path());
    QVERIFY2(error.contains(path) && error.contains(QString::fromLocal8Bit(std::strerror(EFBIG))), qPrintable(error));
    const auto kept = core::AttachFile::read(tmp.path(), &error);
    QVERIFY2(kept && kept->generation == 1, qPrintable(error));
    // No temporary left behind.
    QCOMPARE(QDir(tmp.path()).entryList(QDir::Files | QDir::Hidden), QStringList{QStringLiteral("attach.json")});
}

void TestCheckpoints::batchNormStatisticsResume()
{
    // A model with BatchNorm (examples/torchscript's small CNN: 8 and 16
    // channels) checkpoints its running statistics, and a resumed run takes
    // them back: after one more round (a step of momentum 0.1 towards the
    // batch's statistics) the final model's are still about the
    // checkpoint's. Fresh ones (means 0) would be a tenth of the way there.
    if (test::pythonWithTorch().isEmpty())
        QSKIP("/usr/bin/python3 has no torch");
    QTemporaryDir tmp;
    QString error;
    const QString model = test::exportExampleModel(tmp.path(), {}, &error);
    QVERIFY2(!model.isEmpty(), qPrintable(error));
    const QString dir = tmp.filePath("ckpt");
    protocol::JobSpec job = checkpointJob(dir, 4);
    job.model = model;
    job.strategy = "hop";
    {
        test::LocalRun first;
        QVERIFY(first.start(job, 2));
        QVERIFY(first.waitFinished(60000));
        QVERIFY2(first.ok, qPrintable(first.message));
    }
    QVERIFY2(!checkpointsOf(dir, 0).isEmpty(), "worker 0 wrote no checkpoint");
    const engine::Checkpoint c = engine::Checkpoint::load(QDir(dir).filePath(checkpointsOf(dir, 0).last()));
    QCOMPARE(c.buffers.size(), std::size_t(2 * (8 + 16)));  // running mean and variance per channel
    const std::vector<float> saved(c.buffers.begin(), c.buffers.begin() + 8);  // the first layer's means
    QVERIFY(std::any_of(saved.begin(), saved.end(), [](float m) { return std::abs(m) > 1e-2f; }));

    job.checkpoint = {tmp.filePath("ckpt2"), 60, 1};
    job.resumeFrom = dir;
    job.budget.seconds = 0;
    job.budget.maxRounds = c.round + 1;
    test::LocalRun resumed;
    QVERIFY(resumed.start(job, 2));
    QVERIFY(resumed.waitFinished(60000));
    QVERIFY2(resumed.ok, qPrintable(resumed.message));
    const QString final = tmp.filePath("final.pt");
    QVERIFY(files::writeAtomically(final, resumed.session->data().finalModel(), &error));
    const auto out = test::runPython({"-c", QStringLiteral("import torch\nm = torch.jit.load('%1')\n"
                                                           "print(' '.join(map(str, m.state_dict()['features.1.running_mean'].tolist())))")
                                                .arg(final)},
                                     &error);
    QVERIFY2(out, qPrintable(error));
    const QStringList means = QString::fromLatin1(*out).split(' ', Qt::SkipEmptyParts);
    QCOMPARE(means.size(), 8);
    double distance = 0, norm = 0;
    for (int i = 0; i < 8; ++i) {
        distance += std::pow(means[i].toDouble() - saved[std::size_t(i)], 2);
        norm += std::pow(saved[std::size_t(i)], 2);
    }
    QVERIFY2(std::sqrt(distance) < 0.5 * std::sqrt(norm),
             qPrintable(QStringLiteral("checkpoint %1, after one round %2").arg(QString::number(std::sqrt(norm)))
                            .arg(QString::fromLatin1(*out).trimmed())));
}

void TestCheckpoints::checkpointExportsForPytorch()
{
    // dlion export --checkpoint writes a built-in model's checkpoint as
    // TorchScript (torch.jit.load) and, with --state-dict, as a state_dict
    // (torch.load): the first weights of both are the file's.
    if (test::pythonWithTorch().isEmpty())
        QSKIP("/usr/bin/python3 has no torch");
    QTemporaryDir tmp;
    const QString dir = tmp.filePath("ckpt");
    {
        test::LocalRun run;
        QVERIFY(run.start(checkpointJob(dir, 3), 2));
        QVERIFY(run.waitFinished(60000));
        QVERIFY2(run.ok, qPrintable(run.message));
    }
    QVERIFY2(!checkpointsOf(dir, 0).isEmpty(), "worker 0 wrote no checkpoint");
    const QString file = QDir(dir).filePath(checkpointsOf(dir, 0).last());
    const engine::Checkpoint c = engine::Checkpoint::load(file);
    const QString out = tmp.filePath("model.pt"), state = tmp.filePath("state.pt");
    QProcess cli;
    for (const QStringList &options : {QStringList{"-o", out}, QStringList{"--state-dict", "-o", state}}) {
        cli.start(qEnvironmentVariable("DLION_CLI"), QStringList{"export", "--checkpoint", file} + options);
        QVERIFY(cli.waitForFinished(120000));
        QVERIFY2(cli.exitCode() == 0, cli.readAllStandardError().constData());
    }
    QString error;
    const auto first = test::runPython({"-c", QStringLiteral("import torch\nprint(float(torch.jit.load('%1').state_dict()['fc1.weight'].flatten()[0]),"
                                                             " float(torch.load('%2')['fc1.weight'].flatten()[0]))")
                                                  .arg(out, state)},
                                       &error);
    QVERIFY2(first, qPrintable(error));
    const QStringList weights = QString::fromLatin1(*first).split(' ', Qt::SkipEmptyParts);
    QCOMPARE(weights.size(), 2);
    QCOMPARE(weights[0].toFloat(), c.params.front());
    QCOMPARE(weights[1].toFloat(), c.params.front());
    // A checkpoint of another dataset's shape is refused with the file named.
    cli.start(qEnvironmentVariable("DLION_CLI"), {"export", "--checkpoint", file, "--dataset", "shapes", "-o", out});
    QVERIFY(cli.waitForFinished(120000));
    QCOMPARE(cli.exitCode(), 1);
    const QString message = QString::fromLocal8Bit(cli.readAllStandardError());
    QVERIFY2(message.contains(file) && message.contains("give the dataset it was trained on"), qPrintable(message));
}

QTEST_GUILESS_MAIN(TestCheckpoints)
#include "tst_checkpoints.moc"
