#include "host_dialog.h"

#include "field_marker.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QToolButton>

namespace dlion::ui {

HostDialog::HostDialog(const QJsonObject &host, QWidget *parent)
    : QDialog(parent), m_name(new QLineEdit(host.value("name").toString(), this)),
      m_address(new QLineEdit(host.value("address").toString(), this)),
      m_user(new QLineEdit(host.value("user").toString(), this)),
      m_keyFile(new QLineEdit(host.value("key_file").toString(), this)),
      m_workDir(new QLineEdit(host.value("work_dir").toString(), this)),
      m_dataDir(new QLineEdit(host.value("data_dir").toString(), this)), m_port(new QSpinBox(this)),
      m_auth(new QComboBox(this)), m_dataset(new QComboBox(this)), m_problem(new QLabel(this)), m_kept(host)
{
    setWindowTitle(host.isEmpty() ? tr("Add host") : tr("Edit host"));
    m_name->setPlaceholderText(tr("edge-1"));
    m_name->setToolTip(tr("A unique label for this machine"));
    m_address->setPlaceholderText(tr("10.0.0.5 or host.example.org"));
    m_user->setPlaceholderText(tr("login name on the host"));
    m_port->setRange(1, 65535);
    m_port->setValue(host.value("port").toInt(22));
    m_auth->addItem(tr("SSH agent"), QStringLiteral("agent"));
    m_auth->addItem(tr("Key file"), QStringLiteral("key"));
    m_auth->addItem(tr("Password (asked when connecting)"), QStringLiteral("password"));
    m_auth->setCurrentIndex(qMax(0, m_auth->findData(host.value("auth").toString(QStringLiteral("agent")))));
    m_workDir->setPlaceholderText(tr("~/dlion (default)"));
    m_dataDir->setObjectName(QStringLiteral("hostDataDir"));
    m_dataDir->setPlaceholderText(tr("the job's (default)"));
    m_dataDir->setToolTip(tr("This host's own training data, where it is on the host (an absolute path). "
                             "When any host names its data, every host trains on its own data only"));
    m_dataset->setObjectName(QStringLiteral("hostDataset"));
    m_dataset->addItem(tr("the job's"), QString());
    for (const char *format : {"imagefolder", "csv", "npy", "fashion-mnist", "mnist", "cifar10"})
        m_dataset->addItem(QString::fromLatin1(format), QString::fromLatin1(format));
    m_dataset->setToolTip(tr("Format of this host's data: imagefolder (DIR/train/<class>/*.png), csv (DIR/train.csv), "
                             "npy (DIR/train/x.npy, y.npy), ..."));
    m_dataset->setCurrentIndex(qMax(0, m_dataset->findData(host.value("dataset").toString())));
    m_problem->setStyleSheet(QStringLiteral("color: #d0463b"));
    m_problem->setWordWrap(true);

    auto *browse = new QToolButton(this);
    browse->setText(tr("…"));
    browse->setToolTip(tr("Choose the private key file"));
    connect(browse, &QToolButton::clicked, this, [this] {
        const QString f = QFileDialog::getOpenFileName(this, tr("Private key"), QDir::homePath() + "/.ssh");
        if (!f.isEmpty())
            m_keyFile->setText(f);
    });
    auto *key = new QHBoxLayout;
    key->addWidget(m_keyFile, 1);
    key->addWidget(browse);

    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    m_ok = buttons->button(QDialogButtonBox::Ok);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);

    auto *form = new QFormLayout(this);
    form->addRow(tr("&Name:"), m_name);
    form->addRow(tr("&Address:"), m_address);
    form->addRow(tr("&Port:"), m_port);
    form->addRow(tr("&User:"), m_user);
    form->addRow(tr("A&uthentication:"), m_auth);
    form->addRow(tr("&Key file:"), key);
    form->addRow(tr("&Work folder:"), m_workDir);
    form->addRow(tr("&Data folder:"), m_dataDir);
    form->addRow(tr("Data &format:"), m_dataset);
    form->addRow(m_problem);
    form->addRow(buttons);

    for (QLineEdit *e : {m_name, m_address, m_user, m_keyFile, m_dataDir})
        connect(e, &QLineEdit::textChanged, this, &HostDialog::check);
    connect(m_auth, &QComboBox::currentIndexChanged, this, &HostDialog::check);
    check();
}

void HostDialog::check()
{
    const bool keyAuth = m_auth->currentData() == QLatin1String("key");
    m_keyFile->setEnabled(keyAuth);
    QString problem;
    auto require = [&](QLineEdit *field, bool ok, const QString &message) {
        if (ok)
            return FieldMarker::clear(field);
        FieldMarker::mark(field, message);
        if (problem.isEmpty())
            problem = message;
    };
    require(m_name, !m_name->text().trimmed().isEmpty() && !m_name->text().contains(' '),
            tr("Give the host a name without spaces."));
    require(m_address, !m_address->text().trimmed().isEmpty(), tr("Give the host's address or DNS name."));
    require(m_user, !m_user->text().trimmed().isEmpty(), tr("Give the user to log in as."));
    require(m_keyFile, !keyAuth || !m_keyFile->text().trimmed().isEmpty(), tr("Choose the private key file."));
    const QString dataDir = m_dataDir->text().trimmed();
    require(m_dataDir, dataDir.isEmpty() || dataDir.startsWith('/'),
            tr("Give the data folder as an absolute path on the host, or leave it empty."));
    m_problem->setText(problem);
    m_ok->setEnabled(problem.isEmpty());
}

QJsonObject HostDialog::host() const
{
    // Fields this dialog does not show (slowdown, link_mbps, ...) stay.
    QJsonObject h = m_kept;
    for (const char *key : {"key_file", "data_dir", "dataset"})
        h.remove(QLatin1String(key));
    h.insert("name", m_name->text().trimmed());
    h.insert("address", m_address->text().trimmed());
    h.insert("port", m_port->value());
    h.insert("user", m_user->text().trimmed());
    h.insert("auth", m_auth->currentData().toString());
    if (m_auth->currentData() == QLatin1String("key"))
        h.insert("key_file", m_keyFile->text().trimmed());
    h.insert("work_dir", m_workDir->text().trimmed().isEmpty() ? QStringLiteral("~/dlion") : m_workDir->text().trimmed());
    if (!m_dataDir->text().trimmed().isEmpty())
        h.insert("data_dir", m_dataDir->text().trimmed());
    if (!m_dataset->currentData().toString().isEmpty())
        h.insert("dataset", m_dataset->currentData().toString());
    return h;
}

} // namespace dlion::ui
