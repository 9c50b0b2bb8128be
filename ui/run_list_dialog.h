#pragma once

#include <QDialog>

class QLabel;
class QLineEdit;
class QTableWidget;

namespace dlion::ui {

// The runs recorded in the run store (the same list `dlion runs` prints),
// newest first, with a search box and an export button. Opens the store
// read-only.
class RunListDialog : public QDialog {
    Q_OBJECT
public:
    explicit RunListDialog(const QString &storePath, QWidget *parent = nullptr);

    // Reloads the list; returns how many runs it shows.
    int reload();
    qint64 selectedRunId() const;
    QTableWidget *table() const { return m_table; }

Q_SIGNALS:
    void exportRequested(qint64 runId);

private:
    QString m_storePath;
    QLineEdit *m_search;
    QTableWidget *m_table;
    QLabel *m_status;
};

} // namespace dlion::ui
