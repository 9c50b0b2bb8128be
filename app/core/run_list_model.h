#pragma once

#include "run_store.h"

#include <QAbstractTableModel>
#include <QList>

namespace dlion::core {

// The run list as a table model (QtCore only) for the GUI's run browser:
// one row per stored run, newest first. Display text carries units; the
// SortRole gives the raw value so a QSortFilterProxyModel sorts numbers as
// numbers. The model reads through a RunStore the caller owns and opened
// (read-only is enough); refresh() re-queries with a filter.
class RunListModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Id, Created, Status, Strategy, Model, Dataset, Workers, FinalAccuracy, TrainSeconds, SamplesPerS,
                  BytesSent, Tags, ColumnCount };
    static constexpr int SortRole = Qt::UserRole + 1;
    static constexpr int RunIdRole = Qt::UserRole + 2;

    explicit RunListModel(RunStore *store, QObject *parent = nullptr);

    // False (and the previous rows kept) when the store cannot be read;
    // the store's errorString() says why.
    bool refresh(const RunFilter &filter = {});
    const RunFilter &filter() const { return m_filter; }
    qint64 runId(int row) const;
    const RunInfo *run(int row) const;
    int rowOf(qint64 runId) const;

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    RunStore *m_store;
    RunFilter m_filter;
    QList<RunInfo> m_runs;
};

} // namespace dlion::core
