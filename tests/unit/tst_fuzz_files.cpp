// Fuzzed job and cluster files: thousands of seeded mutations of valid
// files, plus hand-made hostile ones. Each is either accepted as a valid
// job/cluster (and then survives a round trip through its own JSON) or
// refused with one clear message; nothing crashes or runs away.
#include <cluster_spec.h>
#include <job_builder.h>

#include <QFile>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QtTest>

#include <chrono>
#include <fcntl.h>
#include <future>
#include <sys/stat.h>
#include <unistd.h>

using namespace dlion;

namespace {

constexpr quint32 kSeed = 20261203;
constexpr int kMutations = 1500;

const char kJobYaml[] = "strategy: dlion\nmodel: mlp\ndataset: fashion-mnist\nworkers: 3\nbatch_size: 32\nlr: 0.05\n"
                        "budget:\n  seconds: 30\n  target_accuracy: 0.8\nslowdown: [1, 2, 4]\n"
                        "emulation:\n  links: lan-hetero\n  latency_ms: 2\nstrategy_options:\n  dkt: true\n  dkt_period: 25\n";
const char kJobJson[] = R"({"strategy": "allreduce", "model": "lenet5", "workers": 2, "partition": "dirichlet:0.5",
  "budget": {"max_rounds": 100, "epochs": 1}, "eval_interval_s": 5, "seed": 7})";
const char kClusterYaml[] = "name: lab\nrendezvous_port: 29600\nagent_port: 7070\nhosts:\n"
                            "  - {name: edge-1, address: 10.0.0.5, user: alice, auth: key, key_file: /k, work_dir: /tmp/d, slowdown: 2}\n"
                            "  - {address: edge-2.lan, port: 2222, user: bob, auth: password, work_dir: ~/dl, agent_port: 0}\n";

// Edits that break structure more often than plain random bytes do.
QByteArray mutate(QByteArray text, QRandomGenerator &rng)
{
    static const QByteArray specials = QByteArrayLiteral(":-[]{},&*!|>'\"#\n\t %\\0123456789.eE+");
    const int edits = 1 + int(rng.bounded(4));
    for (int e = 0; e < edits && !text.isEmpty(); ++e) {
        const int at = int(rng.bounded(text.size()));
        const int len = 1 + int(rng.bounded(qMin<qsizetype>(16, text.size() - at)));
        switch (rng.bounded(6)) {
        case 0: text[at] = specials[rng.bounded(specials.size())]; break;
        case 1: text[at] = char(rng.bounded(256)); break;
        case 2: text.remove(at, len); break;
        case 3: text.insert(at, text.mid(int(rng.bounded(text.size())), len)); break;
        case 4: text.truncate(at); break;
        default: text.insert(at, specials.mid(int(rng.bounded(specials.size())), 1).repeated(1 + int(rng.bounded(40))));
        }
    }
    return text;
}

QString write(const QTemporaryDir &dir, const QString &name, const QByteArray &text)
{
    QFile f(dir.filePath(name));
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) || f.write(text) != text.size())
        qFatal("cannot write %s", qPrintable(f.fileName()));
    return f.fileName();
}

// A refusal must say what is wrong, and where: the file or the field.
bool isClearError(const QString &error, const QString &path)
{
    return !error.isEmpty() && error.size() < 600 && (error.contains(path) || error.contains(QLatin1String("field \"")));
}

} // namespace

class TestFuzzFiles : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void mutatedJobFiles_data();
    void mutatedJobFiles();
    void mutatedClusterFiles();
    void hostileFiles_data();
    void hostileFiles();
    void nonRegularFilesAreRefusedPromptly();
};

void TestFuzzFiles::mutatedJobFiles_data()
{
    QTest::addColumn<QByteArray>("original");
    QTest::addColumn<QString>("name");
    QTest::newRow("yaml") << QByteArray(kJobYaml) << QStringLiteral("job.yaml");
    QTest::newRow("json") << QByteArray(kJobJson) << QStringLiteral("job.json");
}

void TestFuzzFiles::mutatedJobFiles()
{
    QFETCH(QByteArray, original);
    QFETCH(QString, name);
    QTemporaryDir dir;
    QRandomGenerator rng(kSeed);
    int accepted = 0, refused = 0;
    QString error;
    QVERIFY2(core::buildJob(write(dir, name, original), {}, &error), qPrintable(error));
    for (int i = 0; i < kMutations; ++i) {
        const QByteArray text = mutate(original, rng);
        const QString path = write(dir, name, text);
        error.clear();
        const auto job = core::buildJob(path, {}, &error);
        if (!job) {
            QVERIFY2(isClearError(error, path), qPrintable(QStringLiteral("case %1: unclear error \"%2\" for:\n%3")
                                                               .arg(i).arg(error, QString::fromUtf8(text))));
            ++refused;
            continue;
        }
        // Whatever is accepted is a valid job the agents will accept too.
        QString again;
        const auto spec = protocol::JobSpec::fromJson(job->spec.toJson(), &again);
        QVERIFY2(spec, qPrintable(QStringLiteral("case %1: accepted, but its own JSON is refused: %2").arg(i).arg(again)));
        QCOMPARE(spec->toJson(), job->spec.toJson());
        ++accepted;
    }
    qInfo("%s: %d mutations accepted, %d refused with a clear message", qPrintable(name), accepted, refused);
    QVERIFY(refused > kMutations / 10);  // the mutations do break files
}

void TestFuzzFiles::mutatedClusterFiles()
{
    QTemporaryDir dir;
    QRandomGenerator rng(kSeed + 1);
    int accepted = 0, refused = 0;
    QString error;
    QVERIFY2(core::ClusterSpec::load(write(dir, "lab.yaml", kClusterYaml), &error), qPrintable(error));
    for (int i = 0; i < kMutations; ++i) {
        const QByteArray text = mutate(kClusterYaml, rng);
        const QString path = write(dir, "lab.yaml", text);
        error.clear();
        const auto spec = core::ClusterSpec::load(path, &error);
        if (!spec) {
            const bool clear = !error.isEmpty() && error.size() < 600 && error.contains(path);
            QVERIFY2(clear, qPrintable(QStringLiteral("case %1: unclear error \"%2\" for:\n%3").arg(i).arg(error, QString::fromUtf8(text))));
            ++refused;
            continue;
        }
        QVERIFY2(!spec->hosts.isEmpty(), qPrintable(QStringLiteral("case %1: a cluster without hosts was accepted").arg(i)));
        ++accepted;
    }
    qInfo("cluster: %d mutations accepted, %d refused with a clear message", accepted, refused);
    QVERIFY(refused > kMutations / 10);
}

void TestFuzzFiles::hostileFiles_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QString>("expected");
    const QString yaml = QStringLiteral("job.yaml");
    QByteArray bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
    for (char c = 'b'; c <= 'j'; ++c)
        bomb += QByteArray(1, c) + ": &" + c + " [" + (QByteArray("*") + char(c - 1) + ", ").repeated(9) + "*" + char(c - 1) + "]\n";
    QTest::newRow("alias bomb") << yaml << bomb << QStringLiteral("more than");
    QTest::newRow("deep nesting") << yaml << ("model: " + QByteArray(200, '[') + QByteArray(200, ']') + "\n") << QStringLiteral("nested deeper");
    QTest::newRow("duplicate field") << yaml << QByteArray("model: mlp\nlr: 0.1\nmodel: cnn\n") << QStringLiteral("\"model\" appears twice");
    QTest::newRow("mapping as key") << yaml << QByteArray("? {a: 1}\n: 2\n") << QStringLiteral("plain text");
    QTest::newRow("binary") << yaml << QByteArray("\x00\xff\xfe\x01\x02garbage\x00", 14) << QStringLiteral("job.yaml");
    QTest::newRow("empty") << yaml << QByteArray() << QStringLiteral("top level");
    QTest::newRow("huge") << yaml << QByteArray("# ").append(QByteArray(2 << 20, 'x')) << QStringLiteral("at most");
    // Qt's JSON parser allows 1024 levels; a job file gets YAML's bound.
    QTest::newRow("deep JSON") << QStringLiteral("job.json") << ("{\"model\": " + QByteArray(200, '[') + QByteArray(200, ']') + "}")
                               << QStringLiteral("nested deeper");
}

void TestFuzzFiles::hostileFiles()
{
    QFETCH(QString, name);
    QFETCH(QByteArray, text);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    const QString path = write(dir, name, text);
    QString error;
    QVERIFY(!core::buildJob(path, {}, &error));
    QVERIFY2(error.contains(path) && error.contains(expected), qPrintable(error));
    // The same file as a cluster file gets the same clear refusal.
    error.clear();
    QVERIFY(!core::ClusterSpec::load(path, &error));
    QVERIFY2(error.contains(expected), qPrintable(error));
}

void TestFuzzFiles::nonRegularFilesAreRefusedPromptly()
{
    QTemporaryDir dir;
    const QString fifo = dir.filePath("job.json");
    QVERIFY(::mkfifo(QFile::encodeName(fifo).constData(), 0600) == 0);
    // Read on a thread so that a reader stuck on the FIFO fails the test
    // instead of hanging it: a writer that comes and goes then releases it.
    auto reading = std::async(std::launch::async, [&] {
        QString error;
        return core::buildJob(fifo, {}, &error) ? QString() : error;
    });
    const bool prompt = reading.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    if (!prompt) {
        const int fd = ::open(QFile::encodeName(fifo).constData(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0)
            ::close(fd);
    }
    const QString fifoError = reading.get();
    QVERIFY2(prompt, "reading a FIFO as a job file blocked");
    QVERIFY2(fifoError.contains(fifo) && fifoError.contains("not a regular file"), qPrintable(fifoError));
    // A directory and a device are refused alike.
    for (const QString &path : {dir.path(), QStringLiteral("/dev/null")}) {
        QString error;
        QVERIFY(!core::ClusterSpec::load(path, &error));
        QVERIFY2(error.contains(path) && error.contains("not a regular file"), qPrintable(error));
    }
}

QTEST_GUILESS_MAIN(TestFuzzFiles)
#include "tst_fuzz_files.moc"
