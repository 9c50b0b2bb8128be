#include "worker_status_list.h"

#include <telemetry_model.h>

#include <QHeaderView>
#include <QIcon>

namespace dlion::ui {

namespace {

enum Column { WorkerCol, StateCol, HeartbeatCol, ShareCol, RateCol, SlowdownCol, Columns };

QString iconFor(const QString &state)
{
    if (state == QLatin1String("running") || state == QLatin1String("finished"))
        return QStringLiteral(":/icons/status-ok.svg");
    if (state == QLatin1String("paused"))
        return QStringLiteral(":/icons/status-paused.svg");
    if (state == QLatin1String("lost") || state == QLatin1String("failed"))
        return QStringLiteral(":/icons/status-lost.svg");
    if (state == QLatin1String("connecting") || state == QLatin1String("idle") || state == QLatin1String("starting"))
        return QStringLiteral(":/icons/status-busy.svg");
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
    m_states = QStringList(workers, QStringLiteral("connecting"));
    for (int w = 0; w < workers; ++w) {
        auto *item = new QTreeWidgetItem(this);
        item->setIcon(WorkerCol, QIcon(QStringLiteral(":/icons/worker.svg")));
        item->setText(WorkerCol, tr("worker %1").arg(w));
        for (int c = HeartbeatCol; c < Columns; ++c)
            item->setTextAlignment(c, Qt::AlignRight | Qt::AlignVCenter);
        setState(w, m_states[w]);
    }
}

void WorkerStatusList::setState(int worker, const QString &state)
{
    if (worker < 0 || worker >= topLevelItemCount())
        return;
    m_states[worker] = state;
    QTreeWidgetItem *item = topLevelItem(worker);
    item->setText(StateCol, state);
    item->setIcon(StateCol, QIcon(iconFor(state)));
}

QString WorkerStatusList::state(int worker) const
{
    return worker >= 0 && worker < m_states.size() ? m_states[worker] : QString();
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
