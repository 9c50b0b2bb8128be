#include <dataset_source.h>
#include <engine_error.h>
#include <idx_reader.h>
#include <partitioner.h>

#include <QTemporaryDir>
#include <QtTest>

#include <zlib.h>

#include <set>

using namespace dlion::engine;

namespace {

QByteArray idxHeader(const std::vector<int> &dims, unsigned char typeByte = 0x08)
{
    QByteArray b;
    b.append(char(0)).append(char(0)).append(char(typeByte)).append(char(dims.size()));
    for (int d : dims) {
        for (int shift = 24; shift >= 0; shift -= 8)
            b.append(char((d >> shift) & 0xff));
    }
    return b;
}

QByteArray idxBytes(const std::vector<int> &dims, int fill, unsigned char typeByte = 0x08)
{
    QByteArray b = idxHeader(dims, typeByte);
    qint64 total = 1;
    for (int d : dims)
        total *= d;
    for (qint64 i = 0; i < total; ++i)
        b.append(char((i + fill) % 10));
    return b;
}

void writeGz(const QString &path, const QByteArray &bytes)
{
    gzFile f = gzopen(path.toLocal8Bit().constData(), "wb");
    gzwrite(f, bytes.constData(), unsigned(bytes.size()));
    gzclose(f);
}

void writePlain(const QString &path, const QByteArray &bytes)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    QCOMPARE(f.write(bytes), bytes.size());
}

// This process's peak resident set (VmHWM) in kB, reset first when `reset`.
qint64 peakRssKb(bool reset = false)
{
    if (reset) {
        QFile clear("/proc/self/clear_refs");
        if (clear.open(QIODevice::WriteOnly))
            clear.write("5");  // resets VmHWM; where refused the peak only ever rises, which the test allows
    }
    QFile status("/proc/self/status");
    if (!status.open(QIODevice::ReadOnly))
        return -1;
    for (const QByteArray &line : status.readAll().split('\n')) {
        if (line.startsWith("VmHWM:"))
            return line.mid(6).simplified().split(' ').value(0).toLongLong();
    }
    return -1;
}

std::string messageOf(const std::function<void()> &fn)
{
    try {
        fn();
    } catch (const EngineError &e) {
        return e.what();
    }
    return {};
}

} // namespace

class TestDatasets : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void readsGzipAndPlainIdx();
    void rejectsTruncatedWrongMagicAndType();
    void missingDatasetNamesFileAndPackage();
    void lyingHeaderAllocatesNoMoreThanTheFileHolds();
    void dimensionsWhoseProductWrapsAreRefused();
    void nonRegularDatasetFilesAreRefused();
    void fashionMnistFromPackage();
    void iidPartitionSizesAndDeterminism();
    void dirichletPartitionSkewsLabels();
    void syntheticDatasetIsDeterministic();
    void cifarBinaryFormat();
    void shapesAreCifarSizedAndColourSaysNothing();

private:
    QTemporaryDir m_dir;
};

void TestDatasets::readsGzipAndPlainIdx()
{
    const QByteArray bytes = idxBytes({3, 2, 2}, 1);
    writeGz(m_dir.filePath("a.gz"), bytes);
    QFile plain(m_dir.filePath("a.idx"));
    QVERIFY(plain.open(QIODevice::WriteOnly));
    plain.write(bytes);
    plain.close();
    for (const QString name : {"a.gz", "a.idx"}) {
        const IdxArray a = readIdx(m_dir.filePath(name).toStdString());
        QCOMPARE(a.dims, (std::vector<std::int64_t>{3, 2, 2}));
        QCOMPARE(a.data.size(), std::size_t(12));
        QCOMPARE(int(a.data[0]), 1);
        QCOMPARE(int(a.data[11]), 2);
    }
}

void TestDatasets::rejectsTruncatedWrongMagicAndType()
{
    QByteArray truncated = idxBytes({100, 28, 28}, 0);
    truncated.chop(500);
    writeGz(m_dir.filePath("trunc.gz"), truncated);
    QByteArray magic = idxBytes({2}, 0);
    magic[0] = 0x1f;
    writeGz(m_dir.filePath("magic.gz"), magic);
    writeGz(m_dir.filePath("float.gz"), idxBytes({2}, 0, 0x0d));
    const std::string t = messageOf([&] { readIdx(m_dir.filePath("trunc.gz").toStdString()); });
    QVERIFY2(t.find("truncated") != std::string::npos && t.find("trunc.gz") != std::string::npos, t.c_str());
    const std::string m = messageOf([&] { readIdx(m_dir.filePath("magic.gz").toStdString()); });
    QVERIFY2(m.find("magic") != std::string::npos, m.c_str());
    const std::string f = messageOf([&] { readIdx(m_dir.filePath("float.gz").toStdString()); });
    QVERIFY2(f.find("not supported") != std::string::npos, f.c_str());
}

void TestDatasets::missingDatasetNamesFileAndPackage()
{
    const std::string m = messageOf([&] { loadDataset("fashion-mnist", m_dir.path().toStdString(), Split::Train); });
    QVERIFY2(m.find("train-images-idx3-ubyte.gz") != std::string::npos, m.c_str());
    QVERIFY2(m.find("dataset-fashion-mnist") != std::string::npos, m.c_str());
    const std::string c = messageOf([&] { loadDataset("cifar10", m_dir.path().toStdString(), Split::Test); });
    QVERIFY2(c.find("test_batch.bin") != std::string::npos, c.c_str());
}

void TestDatasets::lyingHeaderAllocatesNoMoreThanTheFileHolds()
{
    // 20 bytes claiming 2^32 items: refused without allocating the claim.
    const QByteArray header = idxHeader({256, 256, 256, 256});
    QCOMPARE(header.size(), 20);
    writePlain(m_dir.filePath("liar.idx"), header);
    writeGz(m_dir.filePath("liar.gz"), header);
    // Truncated just past one read piece: data arrive, then fall short.
    writeGz(m_dir.filePath("short.gz"), idxHeader({64, 1024, 1024}) + QByteArray((4 << 20) + 5, char(1)));
    for (const QString name : {"liar.idx", "liar.gz", "short.gz"}) {
        const qint64 before = peakRssKb(true);
        QVERIFY(before > 0);
        const std::string m = messageOf([&] { readIdx(m_dir.filePath(name).toStdString()); });
        const qint64 grownMb = (peakRssKb() - before) / 1024;
        QVERIFY2(m.find("truncated") != std::string::npos && m.find(name.toStdString()) != std::string::npos, m.c_str());
        QVERIFY2(grownMb < 50, qPrintable(QString("%1: peak RSS grew %2 MB").arg(name).arg(grownMb)));
    }
}

void TestDatasets::dimensionsWhoseProductWrapsAreRefused()
{
    // 2^28 * 2^28 * 2^8 is 2^64: zero in 64-bit arithmetic.
    writePlain(m_dir.filePath("wrap.idx"), idxHeader({1 << 28, 1 << 28, 1 << 8}));
    const std::string m = messageOf([&] { readIdx(m_dir.filePath("wrap.idx").toStdString()); });
    QVERIFY2(m.find("implausibly large") != std::string::npos && m.find("wrap.idx") != std::string::npos, m.c_str());
}

void TestDatasets::nonRegularDatasetFilesAreRefused()
{
    // A directory and a device where a file belongs.
    QVERIFY(QDir(m_dir.path()).mkpath("folder.gz"));
    for (const QString &path : {m_dir.filePath("folder.gz"), QStringLiteral("/dev/null")}) {
        const std::string m = messageOf([&] { readIdx(path.toStdString()); });
        QVERIFY2(m.find("not a regular file") != std::string::npos && m.find(path.toStdString()) != std::string::npos,
                 m.c_str());
    }
    QTemporaryDir cifar;
    QVERIFY(QDir(cifar.path()).mkpath("test_batch.bin"));
    const std::string c = messageOf([&] { loadDataset("cifar10", cifar.path().toStdString(), Split::Test); });
    QVERIFY2(c.find("not a regular file") != std::string::npos && c.find("test_batch.bin") != std::string::npos, c.c_str());
}

void TestDatasets::fashionMnistFromPackage()
{
    const RawDataset train = loadDataset("fashion-mnist", "", Split::Train);
    const RawDataset test = loadDataset("fashion-mnist", "", Split::Test);
    QCOMPARE(train.size, 60000);
    QCOMPARE(test.size, 10000);
    QCOMPARE(train.height, 28);
    QCOMPARE(train.pixels.size(), std::size_t(60000 * 784));
    std::set<int> classes(train.labels.begin(), train.labels.end());
    QCOMPARE(int(classes.size()), 10);
}

void TestDatasets::iidPartitionSizesAndDeterminism()
{
    std::vector<std::uint8_t> labels(1003);
    for (std::size_t i = 0; i < labels.size(); ++i)
        labels[i] = std::uint8_t(i % 10);
    const auto a = partitionIndices(labels, 10, 4, 0, 7);
    const auto b = partitionIndices(labels, 10, 4, 0, 7);
    const auto c = partitionIndices(labels, 10, 4, 0, 8);
    QCOMPARE(a, b);
    QVERIFY(a != c);
    std::set<std::int64_t> all;
    for (const auto &p : a) {
        QVERIFY(p.size() == 250 || p.size() == 251);
        all.insert(p.begin(), p.end());
    }
    QCOMPARE(all.size(), labels.size());  // disjoint and complete
}

void TestDatasets::dirichletPartitionSkewsLabels()
{
    const RawDataset train = loadDataset("synthetic", "", Split::Train);
    const auto skewed = partitionIndices(train.labels, 10, 4, 0.3, 1);
    const auto iid = partitionIndices(train.labels, 10, 4, 0, 1);
    QCOMPARE(partitionIndices(train.labels, 10, 4, 0.3, 1), skewed);
    // Largest class share per worker: about 0.1 under iid, much more under Dir(0.3).
    auto maxShare = [&](const std::vector<std::int64_t> &part) {
        std::vector<int> counts(10);
        for (auto i : part)
            counts[train.labels[std::size_t(i)]]++;
        return double(*std::max_element(counts.begin(), counts.end())) / double(part.size());
    };
    double skewMean = 0, iidMean = 0;
    std::size_t total = 0;
    for (int w = 0; w < 4; ++w) {
        skewMean += maxShare(skewed[std::size_t(w)]) / 4;
        iidMean += maxShare(iid[std::size_t(w)]) / 4;
        total += skewed[std::size_t(w)].size();
        QVERIFY(skewed[std::size_t(w)].size() >= 10);
    }
    QCOMPARE(total, train.labels.size());
    QVERIFY2(iidMean < 0.15, qPrintable(QString::number(iidMean)));
    QVERIFY2(skewMean > 0.3, qPrintable(QString::number(skewMean)));
}

void TestDatasets::syntheticDatasetIsDeterministic()
{
    const RawDataset a = loadDataset("synthetic", "", Split::Test);
    const RawDataset b = loadDataset("synthetic", "", Split::Test);
    QCOMPARE(a.pixels, b.pixels);
    QCOMPARE(a.labels, b.labels);
    const std::string m = messageOf([&] { partitionIndices(a.labels, 10, 500, 0, 1); });
    QVERIFY2(m.find("too small") != std::string::npos, m.c_str());
}

void TestDatasets::shapesAreCifarSizedAndColourSaysNothing()
{
    const RawDataset a = loadDataset("shapes", "", Split::Test);
    QCOMPARE(a.size, std::int64_t(5000));
    QCOMPARE(a.channels, 3);
    QCOMPARE(a.height, 32);
    QCOMPARE(a.width, 32);
    QCOMPARE(a.pixels.size(), std::size_t(5000 * 3072));
    QCOMPARE(loadDataset("shapes", "", Split::Test).pixels, a.pixels);  // the same on every worker
    // Every class is present, and no class has its own colour: per class,
    // the mean pixel stays within 0.03 of the overall mean (in [0, 1]).
    std::vector<double> sum(10, 0.0);
    std::vector<std::int64_t> count(10, 0);
    double all = 0;
    for (std::int64_t i = 0; i < a.size; ++i) {
        const int c = a.labels[std::size_t(i)];
        QVERIFY(c < 10);
        double s = 0;
        for (std::int64_t j = 0; j < 3072; ++j)
            s += a.pixels[std::size_t(i * 3072 + j)] / 255.0;
        sum[std::size_t(c)] += s / 3072;
        all += s / 3072;
        ++count[std::size_t(c)];
    }
    all /= double(a.size);
    for (int c = 0; c < 10; ++c) {
        QVERIFY2(count[std::size_t(c)] > 400, qPrintable(QString("class %1: %2 images").arg(c).arg(count[std::size_t(c)])));
        const double mean = sum[std::size_t(c)] / double(count[std::size_t(c)]);
        QVERIFY2(std::abs(mean - all) < 0.03, qPrintable(QString("class %1 mean %2 vs %3").arg(c).arg(mean).arg(all)));
    }
    // Train and test are different draws.
    const RawDataset train = loadDataset("shapes", "", Split::Train);
    QCOMPARE(train.size, std::int64_t(30000));
    QVERIFY(!std::equal(a.pixels.begin(), a.pixels.begin() + 3072, train.pixels.begin()));
}

void TestDatasets::cifarBinaryFormat()
{
    // No CIFAR package exists in Debian: write files in its binary layout
    // (label byte + 3072 pixel bytes per image) and read them back.
    QTemporaryDir dir;
    auto write = [&](const QString &name, int images, int firstLabel) {
        QFile f(dir.filePath(name));
        QVERIFY(f.open(QIODevice::WriteOnly));
        for (int i = 0; i < images; ++i) {
            f.putChar(char((firstLabel + i) % 10));
            f.write(QByteArray(3072, char(i)));
        }
    };
    for (int b = 1; b <= 5; ++b)
        write(QString("data_batch_%1.bin").arg(b), 4, b);
    write("test_batch.bin", 3, 0);
    const RawDataset train = loadDataset("cifar10", dir.path().toStdString(), Split::Train);
    QCOMPARE(train.size, 20);
    QCOMPARE(train.channels, 3);
    QCOMPARE(train.height, 32);
    QCOMPARE(int(train.labels[0]), 1);
    QCOMPARE(int(train.labels[4]), 2);
    QCOMPARE(int(train.pixels[3072 * 2 + 5]), 2);
    QCOMPARE(loadDataset("cifar10", dir.path().toStdString(), Split::Test).size, 3);
    QFile trunc(dir.filePath("test_batch.bin"));
    QVERIFY(trunc.resize(3073 * 2 + 100));
    const std::string m = messageOf([&] { loadDataset("cifar10", dir.path().toStdString(), Split::Test); });
    QVERIFY2(m.find("truncated") != std::string::npos, m.c_str());
}

QTEST_GUILESS_MAIN(TestDatasets)
#include "tst_datasets.moc"
