#include <dataset_files.h>
#include <dataset_source.h>
#include <engine_error.h>
#include <idx_reader.h>
#include <partitioner.h>

#include <QImage>
#include <QTemporaryDir>
#include <QtTest>

#include <zlib.h>

#include <algorithm>
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

// An image of `w` x `h` whose pixel (x, y) is grey level `base + x + y`, or
// that colour in red with green 7 and blue 9 when `colour`.
void writeImage(const QString &path, int w, int h, int base, bool colour = false)
{
    QVERIFY(QDir().mkpath(QFileInfo(path).path()));
    QImage img(w, h, colour ? QImage::Format_RGB888 : QImage::Format_Grayscale8);
    for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x)
            img.setPixel(x, y, colour ? qRgb(base + x + y, 7, 9) : qRgb(base + x + y, base + x + y, base + x + y));
    }
    QVERIFY(img.save(path));
}

// A .npy file: version 1 header for `descr` and `shape`, then `data`.
QByteArray npy(const QByteArray &descr, const QByteArray &shape, const QByteArray &data, bool fortran = false)
{
    QByteArray header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False")
                        + ", 'shape': (" + shape + "), }";
    while ((10 + header.size() + 1) % 64 != 0)
        header.append(' ');
    header.append('\n');
    QByteArray out("\x93NUMPY\x01\x00", 8);
    out.append(char(header.size() & 0xff)).append(char(header.size() >> 8));
    return out + header + data;
}

template <typename T>
QByteArray bytesOf(const std::vector<T> &v)
{
    return QByteArray(reinterpret_cast<const char *>(v.data()), qsizetype(v.size() * sizeof(T)));
}

// The message of `fn`'s EngineError names `file` and says `what`.
void expectError(const std::function<void()> &fn, const QString &file, const char *what)
{
    const QString m = QString::fromStdString(messageOf(fn));
    QVERIFY2(m.contains(file) && m.contains(QLatin1String(what)), qPrintable(m.isEmpty() ? QStringLiteral("no error") : m));
}

} // namespace

class TestDatasets : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void readsGzipAndPlainIdx();
    void idxSamplesAreStreamedInAnyOrder();
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
    void imageFolderGivesSortedClassLabels();
    void imageFolderTakesClassNamesAndColour();
    void imageFolderBadFilesAreNamed();
    void csvTableReadsFeaturesAndLabels();
    void csvBadRowsAreNamed();
    void npyArraysOfEachShape();
    void npyBadHeadersAreNamed();
    void userFormatsFollowTheirLayout();

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

void TestDatasets::idxSamplesAreStreamedInAnyOrder()
{
    const QByteArray bytes = idxBytes({5, 3}, 0);  // sample i holds (3i + j) % 10
    writeGz(m_dir.filePath("s.gz"), bytes);
    writePlain(m_dir.filePath("s.idx"), bytes);
    const std::vector<std::int64_t> wanted{4, 0, 4, 2};
    for (const QString name : {"s.gz", "s.idx"}) {
        const std::string path = m_dir.filePath(name).toStdString();
        QCOMPARE(readIdxDims(path), (std::vector<std::int64_t>{5, 3}));
        std::vector<std::uint8_t> out(wanted.size() * 3);
        readIdxSamples(path, wanted, out.data());
        for (std::size_t k = 0; k < wanted.size(); ++k) {
            for (int j = 0; j < 3; ++j)
                QCOMPARE(int(out[k * 3 + std::size_t(j)]), int((3 * wanted[k] + j) % 10));
        }
        const std::string m = messageOf([&] { readIdxSamples(path, {5}, out.data()); });
        QVERIFY2(m.find("holds 5 samples") != std::string::npos && m.find(name.toStdString()) != std::string::npos,
                 m.c_str());
    }
    QByteArray truncated = idxBytes({100, 28, 28}, 0);
    truncated.chop(500);
    writeGz(m_dir.filePath("strunc.gz"), truncated);
    const std::string path = m_dir.filePath("strunc.gz").toStdString();
    std::vector<std::uint8_t> out(784);
    readIdxSamples(path, {0}, out.data());  // whole
    const std::string t = messageOf([&] { readIdxSamples(path, {99}, out.data()); });
    QVERIFY2(t.find("truncated") != std::string::npos && t.find("strunc.gz") != std::string::npos, t.c_str());

    // A few samples of a 64 MB file cost what they hold, not the file.
    writeGz(m_dir.filePath("big.gz"), idxHeader({2048, 32768}) + QByteArray(64 << 20, char(3)));
    const qint64 before = peakRssKb(true);
    std::vector<std::uint8_t> few(16 * 32768);
    readIdxSamples(m_dir.filePath("big.gz").toStdString(), {2047, 0, 1000, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17},
                   few.data());
    const qint64 grownMb = (peakRssKb() - before) / 1024;
    QCOMPARE(int(few.back()), 3);
    QVERIFY2(grownMb < 16, qPrintable(QString("peak RSS grew %1 MB").arg(grownMb)));
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
    // The images stay in their file until samples are asked for.
    QVERIFY(train.pixels.empty());
    std::vector<std::uint8_t> two(2 * 784);
    train.copySamples({59999, 0}, two.data());
    QVERIFY(std::any_of(two.begin(), two.begin() + 784, [](std::uint8_t b) { return b != 0; }));
    QVERIFY(std::any_of(two.begin() + 784, two.end(), [](std::uint8_t b) { return b != 0; }));
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

void TestDatasets::imageFolderGivesSortedClassLabels()
{
    QTemporaryDir dir;
    writeImage(dir.filePath("dog/b.png"), 4, 3, 10);
    writeImage(dir.filePath("cat/a.png"), 4, 3, 20);
    writeImage(dir.filePath("cat/b.png"), 4, 3, 30);
    writePlain(dir.filePath("cat/notes.txt"), "not an image");  // only image files count
    const RawDataset d = readImageFolder(dir.path().toStdString(), {});
    QCOMPARE(d.size, 3);
    QCOMPARE(d.classes, 2);
    QCOMPARE(d.channels, 1);
    QCOMPARE(d.width, 4);
    QCOMPARE(d.height, 3);
    QVERIFY(!d.floats);
    QCOMPARE(d.labels, (std::vector<std::uint8_t>{0, 0, 1}));  // cat, cat, dog
    QCOMPARE(int(d.pixels[0]), 20);
    QCOMPARE(int(d.pixels[12 + 4 * 2 + 3]), 30 + 3 + 2);  // cat/b.png (x 3, y 2)
    QCOMPARE(int(d.pixels[24]), 10);
    QCOMPARE(d.classHistogram(), (std::vector<std::int64_t>{2, 1}));
    QVERIFY(d.mean > 0.05f && d.mean < 0.2f);
}

void TestDatasets::imageFolderTakesClassNamesAndColour()
{
    QTemporaryDir dir;
    writeImage(dir.filePath("cat/a.png"), 5, 2, 40, true);
    writeImage(dir.filePath("cat/b.png"), 5, 2, 50);  // grey, converted to RGB like the first
    const RawDataset d = readImageFolder(dir.path().toStdString(), {"bird", "cat", "dog"});
    QCOMPARE(d.classes, 3);
    QCOMPARE(d.labels, (std::vector<std::uint8_t>{1, 1}));
    QCOMPARE(d.channels, 3);
    QCOMPARE(int(d.pixels[0]), 40);       // red plane first
    QCOMPARE(int(d.pixels[10]), 7);       // then green
    QCOMPARE(int(d.pixels[20 + 9]), 9);   // then blue
    QCOMPARE(int(d.pixels[30]), 50);      // the grey image's red plane
    QCOMPARE(d.classHistogram(), (std::vector<std::int64_t>{0, 2, 0}));
    expectError([&] { readImageFolder(dir.path().toStdString(), {"bird", "dog"}); }, dir.filePath("cat"),
                "not one of the job's class_names");
}

void TestDatasets::imageFolderBadFilesAreNamed()
{
    QTemporaryDir dir;
    writeImage(dir.filePath("mixed/a/1.png"), 4, 4, 0);
    writeImage(dir.filePath("mixed/b/2.png"), 5, 4, 0);
    expectError([&] { readImageFolder(dir.filePath("mixed").toStdString(), {}); }, dir.filePath("mixed/b/2.png"),
                "is 5x4 but");
    writeImage(dir.filePath("trunc/a/1.png"), 16, 16, 0);
    QFile png(dir.filePath("trunc/a/1.png"));
    QVERIFY(png.resize(png.size() / 2));
    expectError([&] { readImageFolder(dir.filePath("trunc").toStdString(), {}); }, png.fileName(), "cannot decode image");
    QVERIFY(QDir().mkpath(dir.filePath("fake/a")));
    writePlain(dir.filePath("fake/a/1.jpg"), "no jpeg here");
    expectError([&] { readImageFolder(dir.filePath("fake").toStdString(), {}); }, dir.filePath("fake/a/1.jpg"),
                "cannot decode image");
    writeImage(dir.filePath("empty/a/1.png"), 4, 4, 0);
    QVERIFY(QDir().mkpath(dir.filePath("empty/b")));
    expectError([&] { readImageFolder(dir.filePath("empty").toStdString(), {}); }, dir.filePath("empty/b"),
                "holds no images");
    QVERIFY(QDir().mkpath(dir.filePath("none")));
    expectError([&] { readImageFolder(dir.filePath("none").toStdString(), {}); }, dir.filePath("none"), "no class folders");
    expectError([&] { readImageFolder(dir.filePath("absent").toStdString(), {}); }, dir.filePath("absent"), "is missing");
}

void TestDatasets::csvTableReadsFeaturesAndLabels()
{
    QTemporaryDir dir;
    writePlain(dir.filePath("t.csv"), "height, label ,weight\r\n1.5,2,-3\n\n0,0,1e3\n");
    const RawDataset d = readCsvTable(dir.filePath("t.csv").toStdString(), {});
    QVERIFY(d.floats);
    QCOMPARE(d.size, 2);
    QCOMPARE(d.channels, 1);
    QCOMPARE(d.height, 1);
    QCOMPARE(d.width, 2);
    QCOMPARE(d.classes, 3);
    QCOMPARE(d.values, (std::vector<float>{1.5f, -3.f, 0.f, 1000.f}));
    QCOMPARE(d.labels, (std::vector<std::uint8_t>{2, 0}));
    QCOMPARE(readCsvTable(dir.filePath("t.csv").toStdString(), {"a", "b", "c", "d"}).classes, 4);
}

void TestDatasets::csvBadRowsAreNamed()
{
    QTemporaryDir dir;
    const auto check = [&](const char *name, const QByteArray &text, const char *what) {
        writePlain(dir.filePath(name), text);
        expectError([&] { readCsvTable(dir.filePath(name).toStdString(), {}); }, dir.filePath(name), what);
    };
    check("word.csv", "x,label\n1,0\n2,abc\n", "line 3, column \"label\": \"abc\" is not a whole class id");
    check("nan.csv", "x,label\nnan,0\n", "line 2, column \"x\": \"nan\" is not a finite number");
    check("short.csv", "x,y,label\n1,2,0\n1,0\n", "line 3 has 2 fields but the header has 3");
    check("nolabel.csv", "x,y\n1,2\n", "needs a header row naming a \"label\" column");
    check("rows.csv", "x,label\n", "has a header but no data rows");
    check("range.csv", "x,label\n1,300\n", "label 300 is out of range");
    expectError([&] { readCsvTable(dir.filePath("absent.csv").toStdString(), {}); }, dir.filePath("absent.csv"),
                "is missing");
    writePlain(dir.filePath("names.csv"), "x,label\n1,2\n");
    expectError([&] { readCsvTable(dir.filePath("names.csv").toStdString(), {"a", "b"}); }, dir.filePath("names.csv"),
                "one per entry of class_names");
}

void TestDatasets::npyArraysOfEachShape()
{
    QTemporaryDir dir;
    const QString x = dir.filePath("x.npy"), y = dir.filePath("y.npy");
    writePlain(y, npy("<i8", "2,", bytesOf<std::int64_t>({1, 0})));
    writePlain(x, npy("|u1", "2, 2, 3", bytesOf<std::uint8_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})));
    RawDataset d = readNpyPair(x.toStdString(), y.toStdString(), {});
    QCOMPARE(d.channels, 1);
    QCOMPARE(d.height, 2);
    QCOMPARE(d.width, 3);
    QVERIFY(!d.floats);
    QCOMPARE(int(d.pixels[11]), 11);
    QCOMPARE(d.labels, (std::vector<std::uint8_t>{1, 0}));
    QCOMPARE(d.classes, 2);
    writePlain(x, npy("<f4", "2, 3, 1, 1", bytesOf<float>({0.5f, 1, 2, 3, 4, -5})));
    d = readNpyPair(x.toStdString(), y.toStdString(), {});
    QCOMPARE(d.channels, 3);
    QVERIFY(d.floats);
    QCOMPARE(d.values[5], -5.f);
    writePlain(x, npy("<f8", "2, 2", bytesOf<double>({0.25, 1, 2, 3})));
    d = readNpyPair(x.toStdString(), y.toStdString(), {});
    QCOMPARE(d.height, 1);
    QCOMPARE(d.width, 2);
    QCOMPARE(d.values, (std::vector<float>{0.25f, 1, 2, 3}));
}

void TestDatasets::npyBadHeadersAreNamed()
{
    QTemporaryDir dir;
    const QString x = dir.filePath("x.npy"), y = dir.filePath("y.npy");
    writePlain(y, npy("<i4", "2,", bytesOf<std::int32_t>({0, 1})));
    const QByteArray good = npy("|u1", "2, 2, 2", QByteArray(8, 1));
    const auto check = [&](const QByteArray &xBytes, const QString &named, const char *what) {
        writePlain(x, xBytes);
        expectError([&] { readNpyPair(x.toStdString(), y.toStdString(), {}); }, named, what);
    };
    check("PK\x03\x04 a zip, not an array", x, "no NumPy magic");
    check(npy("|u1", "2, 2, 2", QByteArray(8, 1)).replace("'shape'", "'shqpe'"), x, "lacks");
    check(npy(">f4", "2, 2", QByteArray(16, 1)), x, "little-endian");
    check(npy("|u1", "2, x", QByteArray(4, 1)), x, "is not a list of sizes");
    check(npy("|u1", "2, 2, 2", QByteArray(8, 1), true), x, "Fortran order");
    check(good.left(good.size() - 3), x, "truncated");
    check(good.left(12), x, "header is truncated");
    check(npy("|u1", "2, 1, 1, 2, 2", QByteArray(8, 1)), x, "expected (N, H, W), (N, C, H, W) or (N, F)");
    check(npy("<i4", "2, 2", QByteArray(16, 1)), x, "must be uint8 or float32/float64");
    check(npy("|u1", "3, 2", QByteArray(6, 1)), y, "holds 2 labels");
    writePlain(y, npy("<f4", "2,", QByteArray(8, 0)));
    check(good, y, "1-D array of integer labels");
    writePlain(y, npy("<i4", "2,", bytesOf<std::int32_t>({0, -1})));
    check(good, y, "label -1 is out of range");
}

void TestDatasets::userFormatsFollowTheirLayout()
{
    QTemporaryDir dir;
    const std::string root = dir.path().toStdString();
    writeImage(dir.filePath("train/a/1.png"), 3, 3, 0);
    writeImage(dir.filePath("test/a/1.png"), 3, 3, 0);
    writeImage(dir.filePath("test/a/2.png"), 3, 3, 0);
    QCOMPARE(loadDataset("imagefolder", root, Split::Train).size, 1);
    QCOMPARE(loadDataset("imagefolder", root, Split::Test).size, 2);
    writePlain(dir.filePath("train.csv"), "f,label\n1,0\n2,1\n3,1\n");
    QCOMPARE(loadDataset("csv", root, Split::Train).size, 3);
    expectError([&] { loadDataset("csv", root, Split::Test); }, dir.filePath("test.csv"), "is missing");
    QVERIFY(QDir().mkpath(dir.filePath("test")));
    writePlain(dir.filePath("test/x.npy"), npy("<f4", "1, 2", bytesOf<float>({1, 2})));
    writePlain(dir.filePath("test/y.npy"), npy("|u1", "1,", QByteArray(1, 0)));
    QCOMPARE(loadDataset("npy", root, Split::Test).width, 2);
    expectError([&] { loadDataset("npy", "", Split::Test); }, "npy", "needs data_dir");
}

QTEST_GUILESS_MAIN(TestDatasets)
#include "tst_datasets.moc"
