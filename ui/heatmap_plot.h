#pragma once

#include <report_qcp.h>

#include <functional>

namespace dlion::ui {

// An N x N matrix of per-link values (row: sending worker, column:
// receiving worker) with a colour scale, and a tooltip per cell.
class HeatmapPlot : public QCustomPlot {
    Q_OBJECT
public:
    using CellText = std::function<QString(int from, int to)>;

    HeatmapPlot(const QString &title, const QString &scaleLabel, QWidget *parent = nullptr);

    void setSize(int workers);
    // Fixed data range, or (upper <= lower) 0 to the largest value.
    void setDataRange(double lower, double upper);
    void setCellText(CellText text) { m_cellText = std::move(text); }
    // Sets every off-diagonal cell from `value` and returns whether any changed.
    bool setValues(const std::function<double(int from, int to)> &value);
    int size() const { return m_size; }
    double value(int from, int to) const;

protected:
    bool event(QEvent *e) override;

private:
    QCPColorMap *m_map;
    QCPColorScale *m_scale;
    CellText m_cellText;
    int m_size = 0;
    double m_lower = 0, m_upper = 0;
};

} // namespace dlion::ui
