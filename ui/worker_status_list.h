#pragma once

#include <control_names.h>

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
    void setState(int worker, dlion::protocol::WorkerState state);
    void noteHeartbeat(int worker);
    // Refreshes the numbers from the model and the heartbeat ages.
    void refresh(const core::TelemetryModel &model);
    // Idle for a row the list does not have.
    protocol::WorkerState state(int worker) const;
    // The selected worker's id, or -1.
    int selectedWorker() const;

private:
    QList<QElapsedTimer> m_lastBeat;
    QList<protocol::WorkerState> m_states;
};

} // namespace dlion::ui
