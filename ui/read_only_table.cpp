#include "read_only_table.h"

#include <QHeaderView>

namespace dlion::ui {

ReadOnlyTable::ReadOnlyTable(const QStringList &headers, QWidget *parent) : QTableWidget(0, int(headers.size()), parent)
{
    setHorizontalHeaderLabels(headers);
    setSelectionBehavior(QAbstractItemView::SelectRows);
    setSelectionMode(QAbstractItemView::SingleSelection);
    setEditTriggers(QAbstractItemView::NoEditTriggers);
    verticalHeader()->setVisible(false);
    horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    horizontalHeader()->setStretchLastSection(true);
    setAlternatingRowColors(true);
}

} // namespace dlion::ui
