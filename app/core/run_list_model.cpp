#include "run_list_model.h"

namespace dlion::core {

RunListModel::RunListModel(RunStore *store, QObject *parent) : QAbstractTableModel(parent), m_store(store) {}

bool RunListModel::refresh(const RunFilter &filter)
{
    QList<RunInfo> runs = m_store->listRuns(filter);
    if (m_store->error() != RunStore::Error::None)
        return false;
    beginResetModel();
    m_filter = filter;
    m_runs = std::move(runs);
    endResetModel();
    return true;
}

qint64 RunListModel::runId(int row) const { return row >= 0 && row < m_runs.size() ? m_runs[row].id : 0; }

const RunInfo *RunListModel::run(int row) const { return row >= 0 && row < m_runs.size() ? &m_runs[row] : nullptr; }

int RunListModel::rowOf(qint64 runId) const
{
    for (int i = 0; i < m_runs.size(); ++i) {
        if (m_runs[i].id == runId)
            return i;
    }
    return -1;
}

int RunListModel::rowCount(const QModelIndex &parent) const { return parent.isValid() ? 0 : int(m_runs.size()); }

int RunListModel::columnCount(const QModelIndex &parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RunListModel::data(const QModelIndex &index, int role) const
{
    if (!index.isValid() || index.row() >= m_runs.size())
        return {};
    const RunInfo &r = m_runs[index.row()];
    if (role == RunIdRole)
        return r.id;
    if (role == Qt::ToolTipRole)
        return r.message.isEmpty() ? QVariant() : QVariant(r.message);
    if (role == Qt::TextAlignmentRole) {
        const bool numeric = index.column() == Id || index.column() >= Workers;
        return numeric && index.column() != Tags ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter)) : QVariant();
    }
    const bool sort = role == SortRole;
    if (role != Qt::DisplayRole && !sort)
        return {};
    switch (index.column()) {
    case Id: return sort ? QVariant(r.id) : QVariant(QString::number(r.id));
    case Created:
        return sort ? QVariant(r.createdAt) : QVariant(r.createdAt.toLocalTime().toString(QStringLiteral("yyyy-MM-dd HH:mm")));
    case Status: return r.status;
    case Strategy: return r.strategy;
    case Model: return r.model;
    case Dataset: return r.dataset;
    case Workers: return sort ? QVariant(r.workers) : QVariant(QString::number(r.workers));
    case FinalAccuracy:
        return sort ? QVariant(r.finalAccuracy) : QVariant(QStringLiteral("%1%").arg(100 * r.finalAccuracy, 0, 'f', 2));
    case TrainSeconds: return sort ? QVariant(r.trainS) : QVariant(QStringLiteral("%1 s").arg(r.trainS, 0, 'f', 1));
    case SamplesPerS:
        return sort ? QVariant(r.samplesPerS) : QVariant(QStringLiteral("%1 samples/s").arg(r.samplesPerS, 0, 'f', 0));
    case BytesSent:
        return sort ? QVariant(r.bytesSent) : QVariant(QStringLiteral("%1 MB").arg(double(r.bytesSent) / 1e6, 0, 'f', 1));
    case Tags: return r.tags.join(QStringLiteral(", "));
    default: return {};
    }
}

QVariant RunListModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    static const char *const names[ColumnCount] = {"Run",       "Created",  "Status",     "Strategy",
                                                   "Model",     "Dataset",  "Workers",    "Final accuracy",
                                                   "Training",  "Throughput", "Sent",     "Tags"};
    return section >= 0 && section < ColumnCount ? QVariant(QString::fromLatin1(names[section])) : QVariant();
}

} // namespace dlion::core
