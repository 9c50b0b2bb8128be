#pragma once

#include <report_qcp.h>

#include <functional>

namespace dlion::ui {

// Each worker's current share of the global batch as one bar per worker.
class ShareBarsPlot : public QCustomPlot {
    Q_OBJECT
public:
    explicit ShareBarsPlot(QWidget *parent = nullptr);

    void setWorkers(int workers);
    // Returns whether any bar changed.
    bool setShares(const std::function<double(int worker)> &sharePercent);
    double share(int worker) const;

private:
    QCPBars *m_bars;
    int m_workers = 0;
};

} // namespace dlion::ui
