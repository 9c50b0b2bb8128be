#pragma once

#include <QTableWidget>

namespace dlion::ui {

// A list-like table: whole rows selected one at a time, not editable in
// place, columns sized to their contents (the last one stretches).
class ReadOnlyTable : public QTableWidget {
    Q_OBJECT
public:
    ReadOnlyTable(const QStringList &headers, QWidget *parent = nullptr);
};

} // namespace dlion::ui
