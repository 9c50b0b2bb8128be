#include "cluster_page.h"

#include "hosts_form.h"
#include "local_cluster_form.h"

#include <QButtonGroup>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QRadioButton>
#include <QStackedWidget>
#include <QVBoxLayout>

namespace dlion::ui {

namespace {

QWidget *choiceCard(QRadioButton *radio, const QString &icon, const QString &detail, QWidget *parent)
{
    auto *card = new QGroupBox(parent);
    auto *iconLabel = new QLabel(card);
    iconLabel->setPixmap(QIcon(icon).pixmap(40, 40));
    auto *text = new QLabel(detail, card);
    text->setWordWrap(true);
    text->setForegroundRole(QPalette::PlaceholderText);
    QFont bold = radio->font();
    bold.setBold(true);
    radio->setFont(bold);
    auto *column = new QVBoxLayout;
    column->addWidget(radio);
    column->addWidget(text);
    auto *row = new QHBoxLayout(card);
    row->addWidget(iconLabel, 0, Qt::AlignTop);
    row->addLayout(column, 1);
    return card;
}

} // namespace

ClusterPage::ClusterPage(QWidget *parent)
    : QWidget(parent), m_localChoice(new QRadioButton(tr("This computer (emulated micro-cloud)"), this)),
      m_machinesChoice(new QRadioButton(tr("My machines"), this)), m_stack(new QStackedWidget(this)),
      m_local(new LocalClusterForm(this)), m_hosts(new HostsForm(this))
{
    m_localChoice->setObjectName(QStringLiteral("modeLocal"));
    m_machinesChoice->setObjectName(QStringLiteral("modeMachines"));
    auto *group = new QButtonGroup(this);
    group->addButton(m_localChoice);
    group->addButton(m_machinesChoice);
    m_localChoice->setChecked(true);

    auto *choices = new QHBoxLayout;
    choices->setSpacing(12);
    choices->addWidget(choiceCard(m_localChoice, QStringLiteral(":/icons/worker.svg"),
                                  tr("Start workers as local processes and emulate slower machines and capped links. "
                                     "Nothing to install."),
                                  this));
    choices->addWidget(choiceCard(m_machinesChoice, QStringLiteral(":/icons/cluster.svg"),
                                  tr("Train across computers you reach over SSH. The agent is uploaded and started "
                                     "for you; data stays on each machine."),
                                  this));
    m_stack->addWidget(m_local);
    m_stack->addWidget(m_hosts);

    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(12, 12, 12, 12);
    layout->setSpacing(12);
    layout->addLayout(choices);
    layout->addWidget(m_stack, 1);

    connect(m_localChoice, &QRadioButton::toggled, this, [this](bool local) {
        m_stack->setCurrentWidget(local ? static_cast<QWidget *>(m_local) : m_hosts);
        Q_EMIT changed();
    });
    connect(m_local, &LocalClusterForm::changed, this, &ClusterPage::changed);
    connect(m_hosts, &HostsForm::changed, this, &ClusterPage::changed);
}

ClusterPage::Mode ClusterPage::mode() const
{
    return m_localChoice->isChecked() ? Mode::Local : Mode::Machines;
}

void ClusterPage::setMode(Mode mode)
{
    (mode == Mode::Local ? m_localChoice : m_machinesChoice)->setChecked(true);
}

} // namespace dlion::ui
