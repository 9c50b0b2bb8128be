#include "worker_status_list.h"

#include <telemetry_model.h>

#include <QHeaderView>
#include <QIcon>

namespace dlion::ui {

namespace {

enum Column { WorkerCol, StateCol, HeartbeatCol, ShareCol, RateCol, SlowdownCol, Columns };

QString iconFor(protocol::WorkerState state)
{
    using protocol::WorkerState;
    switch (state) {
    case WorkerState::Running:
    case WorkerState::Finished:
        return QStringLiteral(":/icons/status-ok.svg");
    case WorkerState::Paused:
        return QStringLiteral(":/icons/status-paused.svg");
    case WorkerState::Lost:
    case WorkerState::Failed:
        return QStringLiteral(":/icons/status-lost.svg");
    case WorkerState::Connecting:
    case WorkerState::Idle:
        return QStringLiteral(":/icons/status-busy.svg");
    case WorkerState::Rendezvous:
    case WorkerState::Loading:
    case WorkerState::Regrouping:
    case WorkerState::Waiting:
        break;
    }
    return QStringLiteral(":/icons/status-unknown.svg");
}

} // namespace

WorkerStatusList::WorkerStatusList(QWidget *parent) : QTreeWidget(parent)
{
    setColumnCount(Columns);
    setHeaderLabels({tr("Worker"), tr("State"), tr("Heartbeat"), tr("Share"), tr("Rate (samples/s)"), tr("Slowdown")});
    setRootIsDecorated(false);
    setUniformRowHeights(true);
    setAlternatingRowColors(true);
    setSelectionMode(QAbstractItemView::SingleSelection);
    header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    header()->setStretchLastSection(true);
    setToolTip(tr("Workers of the current run. A worker whose agent stops answering shows as lost;\n"
                  "the others regroup and train on. Right-click a lost local worker to restart it."));
}

void WorkerStatusList::reset(int workers)
{
    clear();
    m_lastBeat = QList<QElapsedTimer>(workers);
    m_states = QList<protocol::WorkerState>(workers, protocol::WorkerState::Connecting);
    for (int w = 0; w < workers; ++w) {
        auto *item = new QTreeWidgetItem(this);
        item->setIcon(WorkerCol, QIcon(QStringLiteral(":/icons/worker.svg")));
        item->setText(WorkerCol, tr("worker %1").arg(w));
        for (int c = HeartbeatCol; c < Columns; ++c)
            item->setTextAlignment(c, Qt::AlignRight | Qt::AlignVCenter);
        setState(w, m_states[w]);
    }
}

void WorkerStatusList::setState(int worker, protocol::WorkerState state)
{
    if (worker < 0 || worker >= topLevelItemCount())
        return;
    m_states[worker] = state;
    QTreeWidgetItem *item = topLevelItem(worker);
    item->setText(StateCol, protocol::workerStateName(state));
    item->setIcon(StateCol, QIcon(iconFor(state)));
}

protocol::WorkerState WorkerStatusList::state(int worker) const
{
    return m_states.value(worker, protocol::WorkerState::Idle);
}

int WorkerStatusList::selectedWorker() const
{
    return currentItem() && currentItem()->isSelected() ? indexOfTopLevelItem(currentItem()) : -1;
}

void WorkerStatusList::noteHeartbeat(int worker)
{
    if (worker >= 0 && worker < m_lastBeat.size())
        m_lastBeat[worker].start();
}

void WorkerStatusList::refresh(const core::TelemetryModel &model)
{
    for (int w = 0; w < topLevelItemCount(); ++w) {
        QTreeWidgetItem *item = topLevelItem(w);
        const QElapsedTimer &beat = m_lastBeat[w];
        item->setText(HeartbeatCol, beat.isValid() ? tr("%1 s ago").arg(beat.elapsed() / 1000.0, 0, 'f', 1) : tr("—"));
        const auto *r = model.lastRound(w);
        item->setText(ShareCol, r ? tr("%1 %").arg(100.0 * r->share, 0, 'f', 1) : tr("—"));
        item->setText(RateCol, r ? tr("%1 /s").arg(r->rate, 0, 'f', 0) : tr("—"));
        item->setText(SlowdownCol, r ? tr("%1×").arg(r->slowdown, 0, 'g', 3) : tr("—"));
    }
}

} // namespace dlion::ui
