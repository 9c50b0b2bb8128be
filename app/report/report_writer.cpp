#include "report_writer.h"

#include <QApplication>

namespace dlion::report {

std::optional<Format> parseFormat(const QString &name)
{
    const QString n = name.toLower();
    if (n == QLatin1String("html"))
        return Format::Html;
    if (n == QLatin1String("pdf"))
        return Format::Pdf;
    if (n == QLatin1String("csv"))
        return Format::Csv;
    if (n == QLatin1String("json"))
        return Format::Json;
    return std::nullopt;
}

QString formatName(Format f)
{
    switch (f) {
    case Format::Html: return QStringLiteral("html");
    case Format::Pdf: return QStringLiteral("pdf");
    case Format::Csv: return QStringLiteral("csv");
    case Format::Json: return QStringLiteral("json");
    }
    return {};
}

QString defaultOutputName(qint64 runId, Format f)
{
    if (f == Format::Csv)
        return QStringLiteral("run-%1-csv").arg(runId);
    return QStringLiteral("run-%1.%2").arg(runId).arg(formatName(f));
}

Result writeReport(const core::StoredRun &run, Format format, const QString &path)
{
    if ((format == Format::Html || format == Format::Pdf) && !qobject_cast<QApplication *>(QCoreApplication::instance()))
        return {false, QStringLiteral("%1 reports need a QApplication (plots are drawn with QCustomPlot)").arg(formatName(format)), {}, 0};
    switch (format) {
    case Format::Html: return writeHtml(run, path);
    case Format::Pdf: return writePdf(run, path);
    case Format::Csv: return writeCsv(run, path);
    case Format::Json: return writeJson(run, path);
    }
    return {};
}

} // namespace dlion::report
