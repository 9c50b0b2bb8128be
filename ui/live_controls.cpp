#include "live_controls.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QIcon>
#include <QLabel>
#include <QPushButton>

namespace dlion::ui {

LiveControls::LiveControls(QWidget *parent)
    : QWidget(parent), m_worker(new QComboBox(this)), m_from(new QComboBox(this)), m_to(new QComboBox(this)),
      m_slowdown(new QDoubleSpinBox(this)), m_cap(new QDoubleSpinBox(this)),
      m_applySlowdown(new QPushButton(QIcon(QStringLiteral(":/icons/apply.svg")), tr("Apply"), this)),
      m_applyCap(new QPushButton(QIcon(QStringLiteral(":/icons/apply.svg")), tr("Apply"), this))
{
    m_slowdown->setRange(1, 100);
    m_slowdown->setDecimals(1);
    m_slowdown->setSingleStep(0.5);
    m_slowdown->setSuffix(tr("×"));
    m_slowdown->setValue(4);
    m_slowdown->setToolTip(tr("New compute slowdown of the worker (1× = full speed)"));
    m_cap->setRange(0, 100000);
    m_cap->setDecimals(0);
    m_cap->setSuffix(tr(" Mbit/s"));
    m_cap->setSpecialValueText(tr("uncapped"));
    m_cap->setValue(10);
    m_cap->setToolTip(tr("New bandwidth cap of the link (0 = uncapped)"));
    m_applySlowdown->setObjectName(QStringLiteral("applySlowdown"));
    m_applyCap->setObjectName(QStringLiteral("applyLinkCap"));
    m_applySlowdown->setToolTip(tr("Send the slowdown to the worker now"));
    m_applyCap->setToolTip(tr("Send the cap to the sending worker now"));

    auto *grid = new QGridLayout(this);
    grid->setContentsMargins(6, 6, 6, 6);
    auto *workerIcon = new QLabel(this);
    workerIcon->setPixmap(QIcon(QStringLiteral(":/icons/worker.svg")).pixmap(16, 16));
    auto *linkIcon = new QLabel(this);
    linkIcon->setPixmap(QIcon(QStringLiteral(":/icons/link.svg")).pixmap(16, 16));
    grid->addWidget(workerIcon, 0, 0);
    grid->addWidget(new QLabel(tr("Slow down"), this), 0, 1);
    grid->addWidget(m_worker, 0, 2, 1, 2);
    grid->addWidget(m_slowdown, 0, 4);
    grid->addWidget(m_applySlowdown, 0, 5);
    grid->addWidget(linkIcon, 1, 0);
    grid->addWidget(new QLabel(tr("Cap link"), this), 1, 1);
    grid->addWidget(m_from, 1, 2);
    grid->addWidget(m_to, 1, 3);
    grid->addWidget(m_cap, 1, 4);
    grid->addWidget(m_applyCap, 1, 5);
    grid->setColumnStretch(2, 1);
    grid->setColumnStretch(3, 1);

    connect(m_applySlowdown, &QPushButton::clicked, this, &LiveControls::applySlowdown);
    connect(m_applyCap, &QPushButton::clicked, this, &LiveControls::applyLinkCap);
    setWorkers(0);
}

void LiveControls::setWorkers(int workers)
{
    for (QComboBox *c : {m_worker, m_from, m_to}) {
        c->clear();
        for (int w = 0; w < workers; ++w)
            c->addItem(tr("worker %1").arg(w), w);
    }
    m_from->setToolTip(tr("Sending worker"));
    m_to->setToolTip(tr("Receiving worker"));
    if (workers > 1)
        m_to->setCurrentIndex(1);
}

void LiveControls::setSlowdownInput(int worker, double factor)
{
    m_worker->setCurrentIndex(worker);
    m_slowdown->setValue(factor);
}

void LiveControls::setLinkInput(int from, int to, double mbps)
{
    m_from->setCurrentIndex(from);
    m_to->setCurrentIndex(to);
    m_cap->setValue(mbps);
}

void LiveControls::applySlowdown()
{
    if (m_worker->currentIndex() >= 0)
        Q_EMIT slowdownRequested(m_worker->currentIndex(), m_slowdown->value());
}

void LiveControls::applyLinkCap()
{
    if (m_from->currentIndex() >= 0 && m_to->currentIndex() >= 0 && m_from->currentIndex() != m_to->currentIndex())
        Q_EMIT linkCapRequested(m_from->currentIndex(), m_to->currentIndex(), m_cap->value());
}

} // namespace dlion::ui
