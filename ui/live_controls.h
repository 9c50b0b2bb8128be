#pragma once

#include <QWidget>

class QComboBox;
class QDoubleSpinBox;
class QPushButton;

namespace dlion::ui {

// Changes the emulated micro-cloud while a run trains: one worker's compute
// slowdown, or one link's bandwidth cap, to watch DLion react.
class LiveControls : public QWidget {
    Q_OBJECT
public:
    explicit LiveControls(QWidget *parent = nullptr);

    void setWorkers(int workers);
    void setSlowdownInput(int worker, double factor);
    void setLinkInput(int from, int to, double mbps);
    void applySlowdown();
    void applyLinkCap();

Q_SIGNALS:
    void slowdownRequested(int worker, double factor);
    void linkCapRequested(int from, int to, double mbps);

private:
    QComboBox *m_worker, *m_from, *m_to;
    QDoubleSpinBox *m_slowdown, *m_cap;
    QPushButton *m_applySlowdown, *m_applyCap;
};

} // namespace dlion::ui
