#include "local_cluster_form.h"

#include "field_marker.h"

#include <link_presets.h>

#include <QComboBox>
#include <QFormLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QLabel>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

namespace dlion::ui {

namespace {

double cellValue(const QTableWidget *table, int row, int col)
{
    const QTableWidgetItem *item = table->item(row, col);
    bool ok = false;
    const double v = item ? item->text().trimmed().toDouble(&ok) : 0;
    return ok ? v : 0;
}

} // namespace

LocalClusterForm::LocalClusterForm(QWidget *parent)
    : QWidget(parent), m_workers(new QSpinBox(this)), m_slowdown(new QTableWidget(this)),
      m_preset(new QComboBox(this)), m_matrix(new QTableWidget(this)), m_grace(new QSpinBox(this))
{
    m_workers->setObjectName(QStringLiteral("workers"));
    m_workers->setRange(1, 64);
    m_workers->setValue(3);
    m_workers->setSuffix(tr(" workers"));
    m_workers->setToolTip(tr("Number of dlion-agent processes started on this computer"));

    m_slowdown->setObjectName(QStringLiteral("slowdown"));
    m_slowdown->setColumnCount(1);
    m_slowdown->setHorizontalHeaderLabels({tr("Compute slowdown (×)")});
    m_slowdown->horizontalHeader()->setStretchLastSection(true);
    m_slowdown->setToolTip(tr("Emulated compute slowdown per worker: 1 = full speed, 4 = four times slower"));
    m_slowdown->setMaximumWidth(220);

    m_preset->setObjectName(QStringLiteral("linkPreset"));
    m_preset->addItem(tr("Uncapped (loopback)"), QStringLiteral("none"));
    m_preset->addItem(tr("LAN, 800 Mbit/s"), QStringLiteral("lan"));
    m_preset->addItem(tr("Heterogeneous LAN, 800/400/200 Mbit/s"), QStringLiteral("lan-hetero"));
    m_preset->addItem(tr("WAN, 40 Mbit/s"), QStringLiteral("wan"));
    m_preset->addItem(tr("Heterogeneous WAN, 40/20/10 Mbit/s"), QStringLiteral("wan-hetero"));
    m_preset->addItem(tr("Custom matrix"), QStringLiteral("custom"));
    m_preset->setCurrentIndex(m_preset->findData(QStringLiteral("wan-hetero")));
    m_preset->setToolTip(tr("Bandwidth caps the agents emulate on each link; editing a cell switches to a custom matrix"));

    m_matrix->setObjectName(QStringLiteral("linkMatrix"));
    m_matrix->setToolTip(tr("Cap of each directed link in Mbit/s (row: sender, column: receiver)"));
    m_matrix->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);

    m_grace->setObjectName(QStringLiteral("grace"));
    m_grace->setRange(0, 86400);
    m_grace->setSingleStep(60);
    m_grace->setSuffix(tr(" s"));
    m_grace->setSpecialValueText(tr("No: stop the run with DLion Studio"));
    m_grace->setToolTip(tr("How long the agents keep training after DLion Studio closes or crashes; "
                           "File → Attach to run takes the run over again within that time"));

    auto *form = new QFormLayout;
    form->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
    form->addRow(tr("&Workers:"), m_workers);
    form->addRow(tr("&Links:"), m_preset);
    form->addRow(tr("&Train on after closing:"), m_grace);
    auto *tables = new QHBoxLayout;
    tables->setSpacing(12);
    tables->addWidget(m_slowdown);
    auto *matrixBox = new QVBoxLayout;
    matrixBox->addWidget(new QLabel(tr("Link caps (Mbit/s), row → column"), this));
    matrixBox->addWidget(m_matrix);
    tables->addLayout(matrixBox, 1);
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(form);
    layout->addLayout(tables);
    layout->addStretch(1);

    connect(m_workers, &QSpinBox::valueChanged, this, [this] {
        resizeTables();
        Q_EMIT changed();
    });
    connect(m_preset, &QComboBox::currentIndexChanged, this, [this] {
        fillPreset();
        Q_EMIT changed();
    });
    connect(m_slowdown, &QTableWidget::itemChanged, this, [this] {
        if (!m_filling)
            Q_EMIT changed();
    });
    connect(m_matrix, &QTableWidget::itemChanged, this, [this] {
        if (m_filling)
            return;
        if (linkPreset() != QLatin1String("custom")) {
            const QSignalBlocker block(m_preset);
            m_preset->setCurrentIndex(m_preset->findData(QStringLiteral("custom")));
        }
        Q_EMIT changed();
    });
    resizeTables();
}

int LocalClusterForm::workers() const { return m_workers->value(); }
int LocalClusterForm::graceS() const { return m_grace->value(); }
void LocalClusterForm::setGraceS(int s) { m_grace->setValue(s); }
void LocalClusterForm::setWorkers(int n) { m_workers->setValue(n); }
QString LocalClusterForm::linkPreset() const { return m_preset->currentData().toString(); }

void LocalClusterForm::setLinkPreset(const QString &preset)
{
    const int i = m_preset->findData(preset);
    if (i >= 0)
        m_preset->setCurrentIndex(i);
}

void LocalClusterForm::resizeTables()
{
    const int n = workers();
    const int old = m_slowdown->rowCount();
    m_filling = true;
    m_slowdown->setRowCount(n);
    for (int w = old; w < n; ++w)
        m_slowdown->setItem(w, 0, new QTableWidgetItem(QStringLiteral("1")));
    QStringList labels;
    for (int w = 0; w < n; ++w)
        labels << QString::number(w);
    m_slowdown->setVerticalHeaderLabels(labels);
    m_matrix->setRowCount(n);
    m_matrix->setColumnCount(n);
    m_matrix->setVerticalHeaderLabels(labels);
    m_matrix->setHorizontalHeaderLabels(labels);
    m_filling = false;
    // Tables as tall as their rows (up to a limit), so the page does not
    // show a large empty grid for a few workers.
    for (QTableWidget *t : {m_slowdown, m_matrix}) {
        const int rows = t->horizontalHeader()->height() + 2 * t->frameWidth() + n * t->verticalHeader()->defaultSectionSize();
        t->setMaximumHeight(qMin(rows + 2, 440));
    }
    if (linkPreset() != QLatin1String("custom") || old == 0)
        fillPreset();
    else {
        // New rows of a custom matrix start at the first cap in it.
        m_filling = true;
        for (int i = 0; i < n; ++i) {
            for (int j = 0; j < n; ++j) {
                if (!m_matrix->item(i, j))
                    m_matrix->setItem(i, j, new QTableWidgetItem(i == j ? QString() : QStringLiteral("100")));
            }
        }
        m_filling = false;
    }
}

void LocalClusterForm::fillPreset()
{
    const QString preset = linkPreset();
    if (preset == QLatin1String("custom"))
        return;
    const QList<double> rates = protocol::linkPresetRates(preset);
    const int n = workers();
    m_filling = true;
    for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
            const double cap = protocol::linkPresetCap(rates, i, j);
            auto *item = new QTableWidgetItem(i == j ? QString() : cap > 0 ? QString::number(cap) : tr("∞"));
            if (i == j)
                item->setFlags(Qt::NoItemFlags);
            m_matrix->setItem(i, j, item);
        }
    }
    m_filling = false;
}

QList<double> LocalClusterForm::slowdown() const
{
    QList<double> out;
    for (int w = 0; w < m_slowdown->rowCount(); ++w)
        out.append(cellValue(m_slowdown, w, 0));
    return out;
}

void LocalClusterForm::setSlowdown(int worker, double factor)
{
    if (worker >= 0 && worker < m_slowdown->rowCount())
        m_slowdown->item(worker, 0)->setText(QString::number(factor));
}

QList<QList<double>> LocalClusterForm::capMatrix() const
{
    const int n = workers();
    QList<QList<double>> caps(n, QList<double>(n, 0));
    const QString preset = linkPreset();
    const QList<double> rates = protocol::linkPresetRates(preset);
    for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
            if (i != j)
                caps[i][j] = preset == QLatin1String("custom") ? cellValue(m_matrix, i, j) : protocol::linkPresetCap(rates, i, j);
        }
    }
    return caps;
}

void LocalClusterForm::setCap(int from, int to, double mbps)
{
    setLinkPreset(QStringLiteral("custom"));
    if (auto *item = m_matrix->item(from, to))
        item->setText(QString::number(mbps));
}

QJsonObject LocalClusterForm::emulation() const
{
    const QString preset = linkPreset();
    if (preset != QLatin1String("custom"))
        return QJsonObject{{"links", preset}};
    QJsonArray rows;
    for (const QList<double> &row : capMatrix()) {
        QJsonArray r;
        for (double v : row)
            r.append(v);
        rows.append(r);
    }
    return QJsonObject{{"links", rows}};
}

QString LocalClusterForm::validate()
{
    QString first;
    const int n = workers();
    if (linkPreset() == QLatin1String("custom")) {
        for (int i = 0; i < n; ++i) {
            for (int j = 0; j < n; ++j) {
                QTableWidgetItem *item = m_matrix->item(i, j);
                if (i == j || !item)
                    continue;
                const bool bad = !(cellValue(m_matrix, i, j) > 0);
                item->setBackground(bad ? QColor(208, 70, 59, 90) : QBrush());
                item->setToolTip(bad ? tr("Link %1 → %2 needs a cap above 0 Mbit/s").arg(i).arg(j) : QString());
                if (bad && first.isEmpty())
                    first = tr("field \"emulation.links\": the cap of link %1 → %2 must be a number above 0 (Mbit/s)").arg(i).arg(j);
            }
        }
    }
    if (first.isEmpty())
        FieldMarker::clear(m_matrix);
    else
        FieldMarker::mark(m_matrix, first);
    QString slow;
    for (int w = 0; w < m_slowdown->rowCount(); ++w) {
        const bool bad = !(cellValue(m_slowdown, w, 0) >= 1);
        m_slowdown->item(w, 0)->setBackground(bad ? QColor(208, 70, 59, 90) : QBrush());
        m_slowdown->item(w, 0)->setToolTip(bad ? tr("Slowdown must be a number ≥ 1") : QString());
        if (bad && slow.isEmpty())
            slow = tr("field \"slowdown\": worker %1's factor must be a number ≥ 1 (1 = full speed)").arg(w);
    }
    if (slow.isEmpty())
        FieldMarker::clear(m_slowdown);
    else
        FieldMarker::mark(m_slowdown, slow);
    return first.isEmpty() ? slow : first;
}

bool LocalClusterForm::markField(const QString &field, const QString &message)
{
    QWidget *target = nullptr;
    if (field == QLatin1String("slowdown"))
        target = m_slowdown;
    else if (field == QLatin1String("workers"))
        target = m_workers;
    else if (field.startsWith(QLatin1String("emulation")))
        target = m_matrix;
    if (target)
        FieldMarker::mark(target, message);
    return target;
}

void LocalClusterForm::clearMarks()
{
    for (QWidget *w : {static_cast<QWidget *>(m_workers), static_cast<QWidget *>(m_slowdown), static_cast<QWidget *>(m_matrix)})
        FieldMarker::clear(w);
}

} // namespace dlion::ui
