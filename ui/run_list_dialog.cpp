#include "run_list_dialog.h"

#include "read_only_table.h"

#include <run_store.h>

#include <QDialogButtonBox>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace dlion::ui {

namespace {

QTableWidgetItem *numberItem(const QString &text, double sortValue)
{
    auto *item = new QTableWidgetItem(text);
    item->setData(Qt::UserRole, sortValue);
    item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    return item;
}

} // namespace

RunListDialog::RunListDialog(const QString &storePath, QWidget *parent)
    : QDialog(parent), m_storePath(storePath), m_search(new QLineEdit(this)),
      m_table(new ReadOnlyTable({tr("Run"), tr("Started"), tr("Status"), tr("Strategy"), tr("Model"), tr("Dataset"),
                                 tr("Workers"), tr("Accuracy (%)"), tr("Training (s)"), tr("Samples/s"), tr("Merges")},
                                this)),
      m_status(new QLabel(this))
{
    setWindowTitle(tr("Runs"));
    resize(1000, 480);
    m_search->setPlaceholderText(tr("Search id, strategy, model, dataset, tags, notes…"));
    m_search->setClearButtonEnabled(true);
    m_table->setObjectName(QStringLiteral("runsTable"));
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    QPushButton *exportButton = buttons->addButton(tr("&Export report…"), QDialogButtonBox::ActionRole);
    exportButton->setIcon(QIcon(QStringLiteral(":/icons/export.svg")));
    exportButton->setToolTip(tr("Write the selected run as an HTML or PDF report, JSON summary or CSV tables"));
    exportButton->setEnabled(false);
    connect(m_table, &QTableWidget::itemSelectionChanged, exportButton,
            [this, exportButton] { exportButton->setEnabled(selectedRunId() > 0); });
    connect(exportButton, &QPushButton::clicked, this, [this] { Q_EMIT exportRequested(selectedRunId()); });
    auto *layout = new QVBoxLayout(this);
    layout->addWidget(m_search);
    layout->addWidget(m_table, 1);
    layout->addWidget(m_status);
    layout->addWidget(buttons);
    connect(m_search, &QLineEdit::textChanged, this, &RunListDialog::reload);
    reload();
}

int RunListDialog::reload()
{
    m_table->setRowCount(0);
    core::RunStore store;
    if (!store.open(m_storePath, core::RunStore::Mode::ReadOnly)) {
        m_status->setText(store.error() == core::RunStore::Error::Missing
                              ? tr("No runs recorded yet (%1 does not exist).").arg(m_storePath)
                              : store.errorString());
        return 0;
    }
    core::RunFilter filter;
    filter.search = m_search->text().trimmed();
    const QList<core::RunInfo> runs = store.listRuns(filter);
    m_table->setRowCount(int(runs.size()));
    for (int row = 0; row < runs.size(); ++row) {
        const core::RunInfo &r = runs[row];
        m_table->setItem(row, 0, numberItem(QStringLiteral("#%1").arg(r.id), double(r.id)));
        m_table->setItem(row, 1, new QTableWidgetItem(QLocale().toString(r.createdAt.toLocalTime(), QLocale::ShortFormat)));
        auto *status = new QTableWidgetItem(r.status);
        status->setToolTip(r.message);
        m_table->setItem(row, 2, status);
        m_table->setItem(row, 3, new QTableWidgetItem(r.strategy));
        m_table->setItem(row, 4, new QTableWidgetItem(r.model));
        m_table->setItem(row, 5, new QTableWidgetItem(r.dataset));
        m_table->setItem(row, 6, numberItem(QString::number(r.workers), r.workers));
        m_table->setItem(row, 7, numberItem(QString::number(100.0 * r.finalAccuracy, 'f', 1), r.finalAccuracy));
        m_table->setItem(row, 8, numberItem(QString::number(r.trainS, 'f', 1), r.trainS));
        m_table->setItem(row, 9, numberItem(QString::number(r.samplesPerS, 'f', 0), r.samplesPerS));
        m_table->setItem(row, 10, numberItem(QString::number(r.merges), r.merges));
    }
    m_status->setText(tr("%n run(s) in %1", nullptr, int(runs.size())).arg(m_storePath));
    return int(runs.size());
}

qint64 RunListDialog::selectedRunId() const
{
    const int row = m_table->currentRow();
    return row >= 0 ? qint64(m_table->item(row, 0)->data(Qt::UserRole).toDouble()) : 0;
}

} // namespace dlion::ui
