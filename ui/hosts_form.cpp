#include "hosts_form.h"

#include "host_dialog.h"
#include "read_only_table.h"
#include <ssh_config_import.h>

#include <QFileDialog>
#include <QHBoxLayout>
#include <QIcon>
#include <QJsonArray>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace dlion::ui {

namespace {

enum Column { StatusCol, Name, Address, Port, User, Auth, Data, Columns };

QPushButton *button(const QString &icon, const QString &text, const QString &tip, QWidget *parent)
{
    auto *b = new QPushButton(QIcon(QStringLiteral(":/icons/%1.svg").arg(icon)), text, parent);
    b->setToolTip(tip);
    b->setObjectName(icon);
    return b;
}

// Where the host's own data are, or that it takes the job's.
QString dataCell(const QJsonObject &host)
{
    const QString dir = host.value("data_dir").toString(), format = host.value("dataset").toString();
    if (dir.isEmpty() && format.isEmpty())
        return HostsForm::tr("the job's");
    return QStringLiteral("%1 %2").arg(format.isEmpty() ? HostsForm::tr("job format") : format, dir).trimmed();
}

} // namespace

HostsForm::HostsForm(QWidget *parent)
    : QWidget(parent),
      m_table(new ReadOnlyTable({tr("Status"), tr("Name"), tr("Address"), tr("Port"), tr("User"), tr("Login"), tr("Data")}, this)),
      m_knownHosts(new QLineEdit(this)),
      m_add(button("add", tr("&Add…"), tr("Add a machine"), this)),
      m_edit(button("edit", tr("&Edit…"), tr("Edit the selected machine"), this)),
      m_remove(button("remove", tr("&Remove"), tr("Remove the selected machine"), this)),
      m_import(button("import", tr("&Import ~/.ssh/config"), tr("Add the hosts named in your SSH client configuration"), this)),
      m_test(button("test-connection", tr("&Test connection"), QString(), this)),
      m_deploy(button("deploy", tr("&Deploy agents"), QString(), this))
{
    m_table->setObjectName(QStringLiteral("hostsTable"));

    auto *buttons = new QVBoxLayout;
    for (QPushButton *b : {m_add, m_edit, m_remove, m_import})
        buttons->addWidget(b);
    buttons->addSpacing(12);
    buttons->addWidget(m_test);
    buttons->addWidget(m_deploy);
    buttons->addStretch(1);
    m_knownHosts->setObjectName(QStringLiteral("knownHosts"));
    m_knownHosts->setPlaceholderText(tr("~/.ssh/known_hosts"));
    m_knownHosts->setToolTip(tr("Host keys are checked against this file; keys you confirm are added to it"));
    auto *knownHosts = new QHBoxLayout;
    knownHosts->addWidget(new QLabel(tr("Known hosts file:"), this));
    knownHosts->addWidget(m_knownHosts, 1);
    auto *tableColumn = new QVBoxLayout;
    tableColumn->addWidget(m_table, 1);
    tableColumn->addLayout(knownHosts);
    auto *layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(tableColumn, 1);
    layout->addLayout(buttons);
    connect(m_knownHosts, &QLineEdit::textChanged, this, &HostsForm::changed);

    connect(m_add, &QPushButton::clicked, this, [this] {
        HostDialog dialog(QJsonObject{}, this);
        if (dialog.exec() == QDialog::Accepted)
            addHost(dialog.host());
    });
    connect(m_edit, &QPushButton::clicked, this, [this] { editRow(m_table->currentRow()); });
    connect(m_table, &QTableWidget::cellDoubleClicked, this, [this](int row) { editRow(row); });
    connect(m_remove, &QPushButton::clicked, this, [this] {
        const int row = m_table->currentRow();
        if (row < 0)
            return;
        m_hosts.removeAt(row);
        m_status.removeAt(row);
        m_table->removeRow(row);
        updateButtons();
        Q_EMIT changed();
    });
    connect(m_import, &QPushButton::clicked, this, [this] {
        QString path = core::SshConfigImport::defaultPath();
        if (!QFileInfo::exists(path))
            path = QFileDialog::getOpenFileName(this, tr("SSH client configuration"), QDir::homePath());
        if (path.isEmpty())
            return;
        QString error;
        const int added = importSshConfig(path, &error);
        if (!error.isEmpty())
            QMessageBox::warning(this, tr("Import failed"), error);
        else if (added == 0)
            QMessageBox::information(this, tr("Nothing to import"),
                                     tr("%1 names no concrete hosts (only wildcard patterns), or all are already listed.").arg(path));
    });
    connect(m_test, &QPushButton::clicked, this, [this] {
        if (m_table->currentRow() >= 0)
            Q_EMIT testRequested(m_table->currentRow());
    });
    connect(m_deploy, &QPushButton::clicked, this, &HostsForm::deployRequested);
    connect(m_table, &QTableWidget::itemSelectionChanged, this, &HostsForm::updateButtons);
    setDeployAvailable(false, tr("SSH deployment is not part of this build."));
}

void HostsForm::setHosts(const QList<QJsonObject> &hosts)
{
    m_hosts.clear();
    m_status.clear();
    m_table->setRowCount(0);
    for (const QJsonObject &h : hosts)
        addHost(h);
}

void HostsForm::addHost(const QJsonObject &host)
{
    m_hosts.append(host);
    if (!host.contains("work_dir"))
        m_hosts.last().insert("work_dir", QStringLiteral("~/dlion"));
    m_status.append(Status::Unknown);
    m_table->insertRow(m_table->rowCount());
    refreshRow(int(m_hosts.size()) - 1);
    setStatus(int(m_hosts.size()) - 1, Status::Unknown, tr("Not tested yet"));
    updateButtons();
    Q_EMIT changed();
}

void HostsForm::editRow(int row)
{
    if (row < 0 || row >= m_hosts.size())
        return;
    HostDialog dialog(m_hosts[row], this);
    if (dialog.exec() != QDialog::Accepted)
        return;
    m_hosts[row] = dialog.host();
    refreshRow(row);
    setStatus(row, Status::Unknown, tr("Changed; not tested yet"));
    Q_EMIT changed();
}

int HostsForm::importSshConfig(const QString &path, QString *error)
{
    const QList<QJsonObject> found = core::SshConfigImport::readFile(path, error);
    int added = 0;
    for (const QJsonObject &h : found) {
        if (rowOf(h.value("name").toString()) < 0) {
            addHost(h);
            ++added;
        }
    }
    return added;
}

int HostsForm::rowOf(const QString &hostName) const
{
    for (int i = 0; i < m_hosts.size(); ++i) {
        if (m_hosts[i].value("name").toString() == hostName)
            return i;
    }
    return -1;
}

void HostsForm::refreshRow(int row)
{
    const QJsonObject &h = m_hosts[row];
    const QString auth = h.value("auth").toString();
    const QStringList cells = {QString(), h.value("name").toString(), h.value("address").toString(),
                               QString::number(h.value("port").toInt(22)), h.value("user").toString(),
                               auth == QLatin1String("key") ? tr("key %1").arg(h.value("key_file").toString())
                               : auth == QLatin1String("password") ? tr("password")
                                                                     : tr("SSH agent"),
                               dataCell(h)};
    for (int c = Name; c < Columns; ++c)
        m_table->setItem(row, c, new QTableWidgetItem(cells[c]));
}

void HostsForm::setKnownHostsFile(const QString &path)
{
    m_knownHosts->setText(path);
}

void HostsForm::selectRow(int row)
{
    m_table->selectRow(row);
}

void HostsForm::setStatus(int row, Status status, const QString &message)
{
    if (row < 0 || row >= m_hosts.size())
        return;
    m_status[row] = status;
    static const char *icons[] = {"status-unknown", "status-busy", "status-ok", "status-error"};
    auto *item = new QTableWidgetItem(QIcon(QStringLiteral(":/icons/%1.svg").arg(QLatin1String(icons[int(status)]))),
                                      message.section('\n', 0, 0).left(60));
    item->setToolTip(message);
    m_table->setItem(row, StatusCol, item);
}

HostsForm::Status HostsForm::status(int row) const
{
    return row >= 0 && row < m_status.size() ? m_status[row] : Status::Unknown;
}

QJsonObject HostsForm::clusterJson() const
{
    QJsonArray hosts;
    for (const QJsonObject &h : m_hosts)
        hosts.append(h);
    QJsonObject cluster{{"name", QStringLiteral("studio")}, {"hosts", hosts}};
    if (!m_knownHosts->text().trimmed().isEmpty())
        cluster.insert("known_hosts", m_knownHosts->text().trimmed());
    return cluster;
}

void HostsForm::setDeployAvailable(bool available, const QString &whyNot)
{
    m_deployAvailable = available;
    const QString tip = available ? QString() : whyNot;
    m_test->setToolTip(available ? tr("Connect to the selected machine over SSH and check it") : tip);
    m_deploy->setToolTip(available ? tr("Upload and start dlion-agent on every machine") : tip);
    updateButtons();
}

void HostsForm::updateButtons()
{
    const bool selected = m_table->currentRow() >= 0;
    m_edit->setEnabled(selected);
    m_remove->setEnabled(selected);
    m_test->setEnabled(m_deployAvailable && selected);
    m_deploy->setEnabled(m_deployAvailable && !m_hosts.isEmpty());
}

} // namespace dlion::ui
