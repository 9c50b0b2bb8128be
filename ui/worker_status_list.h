#pragma once

#include <QElapsedTimer>
#include <QList>
#include <QTreeWidget>

namespace dlion::core {
class TelemetryModel;
}

namespace dlion::ui {

// One row per worker: state (running / paused / lost ...), time since its
// last heartbeat, and its latest share, compute rate and slowdown.
class WorkerStatusList : public QTreeWidget {
    Q_OBJECT
public:
    explicit WorkerStatusList(QWidget *parent = nullptr);

    void reset(int workers);
    void setState(int worker, const QString &state);
    void noteHeartbeat(int worker);
    // Refreshes the numbers from the model and the heartbeat ages.
    void refresh(const core::TelemetryModel &model);
    QString state(int worker) const;
    // The selected worker's id, or -1.
    int selectedWorker() const;

private:
    QList<QElapsedTimer> m_lastBeat;
    QStringList m_states;
};

} // namespace dlion::ui
