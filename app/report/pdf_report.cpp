// The PDF report: the HTML report's content on A4 pages, text laid out by
// QTextDocument, plots drawn by QCustomPlot as vectors.
#include "report_content.h"
#include "report_plots.h"
#include "report_writer.h"

#include "report_qcp.h"

#include <dlion_version.h>
#include <safe_file.h>

#include <QBuffer>
#include <QFileInfo>
#include <QPdfWriter>
#include <QTextDocument>

#include <functional>
#include <memory>

namespace dlion::report {

namespace {

constexpr int kDpi = 96;  // layout units: CSS pixels; the output stays vector

const char *kDocStyle =
    "h1 { font-size: 16pt; } h2 { font-size: 12pt; } h3 { font-size: 10pt; }"
    " .sub, .dim { color: #666666; } .empty { color: #666666; font-style: italic; }"
    " table.kv th { text-align: left; padding-right: 12px; } table.grid th { background-color: #f0f0f0; }";

// A block of the flow: measured once, drawn at the painter's origin.
struct Block {
    double height = 0;
    bool pageBreakBefore = false;
    std::function<void(QCPPainter *)> draw;
};

std::unique_ptr<QTextDocument> textDoc(const QString &html, double width)
{
    auto doc = std::make_unique<QTextDocument>();
    doc->setDefaultFont(QFont(QStringLiteral("DejaVu Sans"), 8));
    doc->setDefaultStyleSheet(QString::fromLatin1(kDocStyle));
    doc->setDocumentMargin(0);
    doc->setHtml(html);
    doc->setTextWidth(width);
    return doc;
}

class Flow {
public:
    Flow(double width, double height) : m_width(width), m_height(height) {}

    void text(const QString &html, bool pageBreak = false)
    {
        std::shared_ptr<QTextDocument> doc = textDoc(html, m_width);
        const double h = doc->size().height();
        m_blocks.append({h, pageBreak, [doc](QCPPainter *p) { doc->drawContents(p); }});
    }

    void plot(const ReportSeries &s, PlotKind kind, int height, bool pageBreak = false)
    {
        const PlotInfo *info = nullptr;
        for (const auto &p : allPlots()) {
            if (p.kind == kind)
                info = &p;
        }
        auto qcp = std::make_shared<QCustomPlot>();
        if (!buildPlot(qcp.get(), kind, s)) {
            if (info->empty) {
                text(QStringLiteral("<h3>%1</h3><p class=\"empty\">%2</p>")
                         .arg(QString::fromUtf8(info->title), QString::fromUtf8(info->empty).toHtmlEscaped()),
                     pageBreak);
            }
            return;
        }
        std::shared_ptr<QTextDocument> head = textDoc(QStringLiteral("<h3>%1</h3>").arg(QString::fromUtf8(info->title)), m_width);
        std::shared_ptr<QTextDocument> cap = textDoc(
            QStringLiteral("<p class=\"dim\">%1</p>").arg(QString::fromUtf8(info->caption).toHtmlEscaped()), m_width);
        const double hh = head->size().height(), ch = cap->size().height();
        const int w = int(m_width);
        m_blocks.append({hh + height + ch + 8, pageBreak, [=](QCPPainter *p) {
                             head->drawContents(p);
                             p->save();
                             p->translate(0, hh);
                             plotToPainter(qcp.get(), p, w, height);
                             p->restore();
                             p->save();
                             p->translate(0, hh + height + 2);
                             cap->drawContents(p);
                             p->restore();
                         }});
    }

    // Lays the blocks out on pages; a block taller than a page is drawn in
    // page-sized slices. Returns the number of pages.
    int paint(QPdfWriter *writer, QCPPainter *painter, const QString &footer)
    {
        int page = 1;
        double y = 0;
        auto newPage = [&] {
            drawFooter(painter, footer, page);
            writer->newPage();
            ++page;
            y = 0;
        };
        for (const Block &b : m_blocks) {
            if ((b.pageBreakBefore && y > 0) || (y > 0 && y + b.height > m_height))
                newPage();
            for (double offset = 0; offset < b.height; offset += m_height) {
                if (offset > 0)
                    newPage();
                painter->save();
                painter->setClipRect(QRectF(0, y, m_width, m_height - y));
                painter->translate(0, y - offset);
                b.draw(painter);
                painter->restore();
                y += std::min(m_height, b.height - offset);
            }
            y += 10;
        }
        drawFooter(painter, footer, page);
        return page;
    }

private:
    void drawFooter(QCPPainter *p, const QString &footer, int page)
    {
        p->save();
        p->setFont(QFont(QStringLiteral("DejaVu Sans"), 7));
        p->setPen(QColor(130, 130, 130));
        const QRectF r(0, m_height + 8, m_width, 16);
        p->drawText(r, Qt::AlignLeft | Qt::AlignVCenter, footer);
        p->drawText(r, Qt::AlignRight | Qt::AlignVCenter, QStringLiteral("page %1").arg(page));
        p->restore();
    }

    double m_width, m_height;
    QList<Block> m_blocks;
};

} // namespace

Result writePdf(const core::StoredRun &run, const QString &path)
{
    Result r;
    QBuffer pdf;  // rendered whole, then written like every other report
    pdf.open(QIODevice::WriteOnly);
    QPdfWriter writer(&pdf);
    writer.setPageSize(QPageSize(QPageSize::A4));
    writer.setPageMargins(QMarginsF(16, 14, 16, 18), QPageLayout::Millimeter);
    writer.setResolution(kDpi);
    writer.setTitle(content::title(run));
    writer.setCreator(QStringLiteral("DLion Studio %1").arg(QStringLiteral(DLION_VERSION)));
    const QRect area = writer.pageLayout().paintRectPixels(kDpi);
    const double width = area.width(), height = area.height() - 24;  // room for the footer

    const ReportSeries s = ReportSeries::from(run.data);
    Flow flow(width, height);
    flow.text(QStringLiteral("<h1>%1</h1><p class=\"sub\">%2</p><h2>Run summary</h2>%3")
                  .arg(content::title(run).toHtmlEscaped(), content::subtitle(run).toHtmlEscaped(), content::summaryTable(run)));
    flow.text(QStringLiteral("<h2>Final metrics</h2>%1<h3>Per worker</h3>%2<h3>Data per worker</h3>%3")
                  .arg(content::metricsTable(run), content::workersTable(run), content::dataTable(run)));
    flow.text(QStringLiteral("<h2>Accuracy and loss</h2>"), true);
    const int plotH = 250;
    flow.plot(s, PlotKind::AccuracyVsTime, plotH);
    flow.plot(s, PlotKind::AccuracyVsStep, plotH);
    flow.plot(s, PlotKind::LossVsTime, plotH);
    flow.plot(s, PlotKind::LossVsStep, plotH);
    flow.text(QStringLiteral("<h2>Compute shares</h2>"));
    flow.plot(s, PlotKind::Shares, plotH);
    const int heatH = std::clamp(int(s.bandwidth.rows.size()) * 12 + 80, 200, 420);
    flow.text(QStringLiteral("<h2>Links</h2>"), true);
    flow.plot(s, PlotKind::Bandwidth, heatH);
    flow.plot(s, PlotKind::Priority, heatH);
    flow.text(QStringLiteral("<h2>Merges</h2>"));
    flow.plot(s, PlotKind::Merges, 200);
    flow.text(content::mergesTable(run, 30));

    QCPPainter painter(&writer);
    if (!painter.isActive()) {
        r.error = QStringLiteral("cannot draw the PDF %1").arg(QFileInfo(path).absoluteFilePath());
        return r;
    }
    r.pages = flow.paint(&writer, &painter, content::title(run));
    painter.end();
    if (!files::writeAtomically(QFileInfo(path).absoluteFilePath(), pdf.data(), &r.error)) {
        r.pages = 0;
        return r;
    }
    r.ok = true;
    r.files << path;
    return r;
}

} // namespace dlion::report
