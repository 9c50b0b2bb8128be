#include "dataset_files.h"

#include "engine_error.h"
#include "safe_file.h"

#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QImageReader>
#include <QRegularExpression>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

namespace dlion::engine {

namespace {

// Far beyond any table or array a micro-cloud host trains on.
constexpr qint64 kMaxFileBytes = qint64(1) << 34;
const QStringList kImageFilters = {"*.png", "*.jpg", "*.jpeg", "*.bmp", "*.pgm", "*.ppm"};

std::string str(const QString &s) { return s.toStdString(); }

// The whole file; a missing one is named with what was expected there.
QByteArray readWhole(const std::string &path, const std::string &what)
{
    if (!std::filesystem::exists(path))
        throw EngineError(what + " " + path + " is missing; check data_dir and the dataset's layout (see README)");
    QString error;
    const std::optional<QByteArray> bytes = files::readRegular(QString::fromStdString(path), kMaxFileBytes, &error);
    if (!bytes)
        throw EngineError(what + ": " + str(error));
    return *bytes;
}

// ---- image folder

struct ImageShape {
    int width = 0, height = 0, channels = 0;
    QString file;
};

// Appends one decoded image, channel-planar; the first fixes the shape.
void appendImage(RawDataset &d, ImageShape &shape, const QString &path)
{
    QImageReader reader(path);
    QImage image = reader.read();
    if (image.isNull())
        throw EngineError("cannot decode image " + str(path) + ": " + str(reader.errorString())
                          + " (a truncated or non-image file; remove or replace it)");
    if (shape.file.isEmpty())
        shape = {image.width(), image.height(), image.isGrayscale() ? 1 : 3, path};
    if (image.width() != shape.width || image.height() != shape.height)
        throw EngineError(QStringLiteral("image %1 is %2x%3 but %4 is %5x%6: every image must have one size "
                                         "(resize them beforehand)")
                              .arg(path).arg(image.width()).arg(image.height())
                              .arg(shape.file).arg(shape.width).arg(shape.height).toStdString());
    image = image.convertToFormat(shape.channels == 1 ? QImage::Format_Grayscale8 : QImage::Format_RGB888);
    for (int c = 0; c < shape.channels; ++c) {
        for (int y = 0; y < shape.height; ++y) {
            const uchar *line = image.constScanLine(y);
            for (int x = 0; x < shape.width; ++x)
                d.pixels.push_back(line[x * shape.channels + c]);
        }
    }
}

// ---- .npy

struct NpyArray {
    char kind = 0;  // 'u', 'i' or 'f'
    int itemSize = 0;
    std::vector<std::int64_t> shape;
    QByteArray data;
    std::int64_t count() const
    {
        std::int64_t n = 1;
        for (const std::int64_t s : shape)
            n *= s;
        return n;
    }
};

std::string shapeText(const std::vector<std::int64_t> &shape)
{
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + ")";
}

// Parses the magic, version and header dict; `data` is what follows it.
NpyArray parseNpy(const QByteArray &bytes, const std::string &path)
{
    const auto bad = [&](const std::string &why) {
        return EngineError("bad .npy file " + path + ": " + why + " (write it with numpy.save)");
    };
    if (bytes.size() < 10 || !bytes.startsWith("\x93NUMPY"))
        throw bad("no NumPy magic at its start");
    const int major = bytes[6];
    const auto u = [&](int i) { return std::uint32_t(std::uint8_t(bytes[i])); };
    qsizetype headerLen = 0, start = 0;
    if (major == 1) {
        headerLen = u(8) | (u(9) << 8);
        start = 10;
    } else if ((major == 2 || major == 3) && bytes.size() >= 12) {
        headerLen = qsizetype(u(8) | (u(9) << 8) | (u(10) << 16) | (u(11) << 24));
        start = 12;
    } else {
        throw bad("format version " + std::to_string(major) + " is not 1, 2 or 3");
    }
    if (headerLen > bytes.size() - start)
        throw bad("its header is truncated");
    const QString header = QString::fromLatin1(bytes.mid(start, headerLen));
    static const QRegularExpression kDescr(QStringLiteral("'descr'\\s*:\\s*'([<|=])([uif])(\\d+)'"));
    static const QRegularExpression kOrder(QStringLiteral("'fortran_order'\\s*:\\s*(True|False)"));
    static const QRegularExpression kShape(QStringLiteral("'shape'\\s*:\\s*\\(([^)]*)\\)"));
    const auto descr = kDescr.match(header), order = kOrder.match(header), shape = kShape.match(header);
    if (!descr.hasMatch() || !order.hasMatch() || !shape.hasMatch())
        throw bad("its header \"" + str(header.trimmed()) + "\" lacks a little-endian integer or float 'descr', "
                  "'fortran_order' or 'shape'");
    if (order.captured(1) == QLatin1String("True"))
        throw bad("it is in Fortran order; save a C-ordered array (numpy.ascontiguousarray)");
    NpyArray a;
    a.kind = descr.captured(2).at(0).toLatin1();
    a.itemSize = descr.captured(3).toInt();
    std::int64_t total = 1;
    for (const QString &part : shape.captured(1).split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const qlonglong n = part.trimmed().toLongLong(&ok);
        if (!ok || n < 0 || __builtin_mul_overflow(total, std::int64_t(n), &total) || total > kMaxFileBytes)
            throw bad("its shape (" + str(shape.captured(1)) + ") is not a list of sizes");
        a.shape.push_back(n);
    }
    a.data = bytes.mid(start + headerLen);
    if (a.data.size() != total * a.itemSize)
        throw bad("its header declares shape " + shapeText(a.shape) + " of " + std::to_string(a.itemSize)
                  + "-byte items (" + std::to_string(total * a.itemSize) + " bytes) but " + std::to_string(a.data.size())
                  + " data bytes follow (truncated?)");
    return a;
}

template <typename T>
T itemAt(const NpyArray &a, std::int64_t i)
{
    T v;
    std::memcpy(&v, a.data.constData() + i * std::int64_t(sizeof(T)), sizeof(T));
    return v;
}

// Element i as a double, for the integer and float types .npy files use.
double valueAt(const NpyArray &a, std::int64_t i)
{
    switch (a.kind * 16 + a.itemSize) {
    case 'u' * 16 + 1: return itemAt<std::uint8_t>(a, i);
    case 'i' * 16 + 1: return itemAt<std::int8_t>(a, i);
    case 'u' * 16 + 2: return itemAt<std::uint16_t>(a, i);
    case 'i' * 16 + 2: return itemAt<std::int16_t>(a, i);
    case 'u' * 16 + 4: return itemAt<std::uint32_t>(a, i);
    case 'i' * 16 + 4: return itemAt<std::int32_t>(a, i);
    case 'u' * 16 + 8: return double(itemAt<std::uint64_t>(a, i));
    case 'i' * 16 + 8: return double(itemAt<std::int64_t>(a, i));
    case 'f' * 16 + 4: return itemAt<float>(a, i);
    case 'f' * 16 + 8: return itemAt<double>(a, i);
    default: return std::nan("");
    }
}

bool supported(const NpyArray &a)
{
    return (a.kind == 'f' && (a.itemSize == 4 || a.itemSize == 8))
           || (a.kind != 'f' && (a.itemSize == 1 || a.itemSize == 2 || a.itemSize == 4 || a.itemSize == 8));
}

// Sample shape (C, H, W) from x's shape after N.
void setSampleShape(RawDataset &d, const NpyArray &x, const std::string &path)
{
    const auto &s = x.shape;
    if (s.size() == 2)
        d.channels = 1, d.height = 1, d.width = int(s[1]);
    else if (s.size() == 3)
        d.channels = 1, d.height = int(s[1]), d.width = int(s[2]);
    else if (s.size() == 4)
        d.channels = int(s[1]), d.height = int(s[2]), d.width = int(s[3]);
    else
        throw EngineError(path + " has shape " + shapeText(s) + "; expected (N, H, W), (N, C, H, W) or (N, F)");
    if (s[0] == 0 || d.sampleBytes() == 0)
        throw EngineError(path + " has shape " + shapeText(s) + ", which holds no samples");
}

// ---- CSV

QList<QByteArray> csvFields(const QByteArray &line)
{
    QList<QByteArray> fields = line.split(',');
    for (QByteArray &f : fields)
        f = f.trimmed();
    return fields;
}

} // namespace

RawDataset readImageFolder(const std::string &dir, const std::vector<std::string> &classNames)
{
    const QDir root(QString::fromStdString(dir));
    if (!root.exists())
        throw EngineError("image folder " + dir + " is missing: put each class's images in " + dir + "/<class name>/");
    const QStringList folders = root.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name);
    if (folders.isEmpty())
        throw EngineError("image folder " + dir + " has no class folders: put each class's images in " + dir
                          + "/<class name>/");
    std::vector<std::string> names = classNames;
    if (names.empty()) {
        for (const QString &f : folders)
            names.push_back(str(f));
    }
    RawDataset d;
    ImageShape shape;
    std::vector<std::int64_t> labels;
    for (const QString &folder : folders) {
        const auto label = std::find(names.begin(), names.end(), str(folder)) - names.begin();
        if (label == std::ptrdiff_t(names.size()))
            throw EngineError("class folder " + str(root.filePath(folder)) + " is not one of the job's class_names");
        const QDir classDir(root.filePath(folder));
        const QStringList images = classDir.entryList(kImageFilters, QDir::Files, QDir::Name);
        if (images.isEmpty())
            throw EngineError("class folder " + str(classDir.path()) + " holds no images (" + str(kImageFilters.join(", "))
                              + "); add some or remove the folder");
        for (const QString &image : images) {
            appendImage(d, shape, classDir.filePath(image));
            labels.push_back(label);
        }
    }
    d.channels = shape.channels;
    d.height = shape.height;
    d.width = shape.width;
    d.size = std::int64_t(labels.size());
    assignLabels(d, labels, names, dir);
    setPixelStats(d);
    return d;
}

RawDataset readCsvTable(const std::string &path, const std::vector<std::string> &classNames)
{
    const QList<QByteArray> lines = readWhole(path, "CSV file").split('\n');
    qsizetype row = 0;
    while (row < lines.size() && lines[row].trimmed().isEmpty())
        ++row;
    const QList<QByteArray> header = row < lines.size() ? csvFields(lines[row]) : QList<QByteArray>();
    const qsizetype labelColumn = header.indexOf("label");
    if (labelColumn < 0 || header.size() < 2)
        throw EngineError("CSV file " + path + " needs a header row naming a \"label\" column and at least one "
                          "feature column");
    RawDataset d;
    d.floats = true;
    d.channels = d.height = 1;
    d.width = int(header.size() - 1);
    std::vector<std::int64_t> labels;
    for (++row; row < lines.size(); ++row) {
        if (lines[row].trimmed().isEmpty())
            continue;
        const QList<QByteArray> fields = csvFields(lines[row]);
        const std::string where = path + " line " + std::to_string(row + 1);
        if (fields.size() != header.size())
            throw EngineError(where + " has " + std::to_string(fields.size()) + " fields but the header has "
                              + std::to_string(header.size()));
        for (qsizetype c = 0; c < fields.size(); ++c) {
            bool ok = false;
            const double v = fields[c].toDouble(&ok);
            if (!ok || !std::isfinite(v) || (c == labelColumn && v != std::floor(v)))
                throw EngineError(where + ", column \"" + header[c].toStdString() + "\": \"" + fields[c].toStdString()
                                  + "\" is not " + (c == labelColumn ? "a whole class id" : "a finite number"));
            if (c == labelColumn)
                labels.push_back(std::int64_t(v));
            else
                d.values.push_back(float(v));
        }
    }
    if (labels.empty())
        throw EngineError("CSV file " + path + " has a header but no data rows");
    d.size = std::int64_t(labels.size());
    assignLabels(d, labels, classNames, path);
    return d;
}

RawDataset readNpyPair(const std::string &xPath, const std::string &yPath, const std::vector<std::string> &classNames)
{
    const NpyArray x = parseNpy(readWhole(xPath, ".npy file"), xPath);
    const NpyArray y = parseNpy(readWhole(yPath, ".npy file"), yPath);
    RawDataset d;
    setSampleShape(d, x, xPath);
    if (!supported(x) || (x.kind != 'f' && !(x.kind == 'u' && x.itemSize == 1)))
        throw EngineError(xPath + " holds " + std::string(1, x.kind) + std::to_string(x.itemSize * 8)
                          + " data; samples must be uint8 or float32/float64");
    if (y.shape.size() != 1 || y.kind == 'f' || !supported(y))
        throw EngineError(yPath + " must be a 1-D array of integer labels (it has shape " + shapeText(y.shape) + ")");
    if (y.shape[0] != x.shape[0])
        throw EngineError(xPath + " holds " + std::to_string(x.shape[0]) + " samples but " + yPath + " holds "
                          + std::to_string(y.shape[0]) + " labels");
    d.size = x.shape[0];
    d.floats = x.kind == 'f';
    if (d.floats) {
        d.values.resize(std::size_t(x.count()));
        for (std::int64_t i = 0; i < x.count(); ++i) {
            d.values[std::size_t(i)] = float(valueAt(x, i));
            if (!std::isfinite(d.values[std::size_t(i)]))
                throw EngineError(xPath + " holds a NaN or infinite value at element " + std::to_string(i));
        }
    } else {
        d.pixels.assign(x.data.begin(), x.data.end());
        setPixelStats(d);
    }
    std::vector<std::int64_t> labels(std::size_t(d.size));
    for (std::int64_t i = 0; i < d.size; ++i)
        labels[std::size_t(i)] = std::int64_t(std::clamp(valueAt(y, i), -1.0, 1e9));  // range-checked below
    assignLabels(d, labels, classNames, yPath);
    return d;
}

} // namespace dlion::engine
