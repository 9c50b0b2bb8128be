// The comparison page: overlaid accuracy curves and the comparison table.
#include "report_plots.h"
#include "run_comparison.h"

#include "report_qcp.h"

#include <safe_file.h>

#include <QFileInfo>

namespace dlion::report {

bool writeComparisonHtml(const Comparison &c, const QString &path, QString *error)
{
    QList<Series> curves;
    for (const auto &r : c.rows)
        curves.append(r.curve);
    QCustomPlot plot;
    buildOverlay(&plot, curves, QStringLiteral("test accuracy"));
    const QByteArray png = plotPng(&plot, 900, 380);
    QString h = QStringLiteral(
                    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>DLion run comparison</title>"
                    "<style>body { font-family: \"DejaVu Sans\", Helvetica, Arial, sans-serif; font-size: 14px; max-width: 1100px; margin: 24px auto; }"
                    " table { border-collapse: collapse; font-size: 13px; } th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }"
                    " td:first-child, th:first-child { text-align: left; }"
                    " th { background: #f4f4f4; } img { max-width: 100%; } .dim { color: #666; }</style></head><body>\n"
                    "<h1>Run comparison</h1>\n<section id=\"curves\"><h2>Accuracy vs time</h2>"
                    "<img alt=\"accuracy vs time\" src=\"data:image/png;base64,%1\"/></section>\n"
                    "<section id=\"table\"><h2>Results</h2>%2<p class=\"dim\">Speedup: the baseline's time to %3 divided by the run's. "
                    "Accuracy at budget: the last evaluation within %4 s of training.</p></section>\n</body></html>\n")
                    .arg(QString::fromLatin1(png.toBase64()), c.toHtmlTable(),
                         c.targetText(), QString::number(c.budgetS, 'f', 1));
    return files::writeAtomically(QFileInfo(path).absoluteFilePath(), h.toUtf8(), error);
}

} // namespace dlion::report
