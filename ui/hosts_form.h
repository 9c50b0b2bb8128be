#pragma once

#include <QJsonObject>
#include <QList>
#include <QWidget>

class QLineEdit;
class QPushButton;
class QTableWidget;

namespace dlion::ui {

// "My machines": the hosts table (add, edit, remove, import from
// ~/.ssh/config), a connection test per host with a status icon, and
// deployment of the agents with per-host progress.
class HostsForm : public QWidget {
    Q_OBJECT
public:
    enum class Status { Unknown, Busy, Ok, Error };

    explicit HostsForm(QWidget *parent = nullptr);

    QList<QJsonObject> hosts() const { return m_hosts; }
    void setHosts(const QList<QJsonObject> &hosts);
    void addHost(const QJsonObject &host);
    // Appends the concrete hosts of an OpenSSH config file; returns how many.
    int importSshConfig(const QString &path, QString *error);
    // The cluster file (see app/core/cluster_spec.h) these hosts make.
    QJsonObject clusterJson() const;
    int rowOf(const QString &hostName) const;
    // Where host keys are checked and recorded (empty: ~/.ssh/known_hosts).
    void setKnownHostsFile(const QString &path);
    void selectRow(int row);
    void setStatus(int row, Status status, const QString &message);
    Status status(int row) const;
    // Whether test and deploy are available in this build (and why not).
    void setDeployAvailable(bool available, const QString &whyNot);

Q_SIGNALS:
    void changed();
    void testRequested(int row);
    void deployRequested();

private:
    void refreshRow(int row);
    void editRow(int row);
    void updateButtons();

    QTableWidget *m_table;
    QLineEdit *m_knownHosts;
    QPushButton *m_add, *m_edit, *m_remove, *m_import, *m_test, *m_deploy;
    QList<QJsonObject> m_hosts;
    QList<Status> m_status;
    bool m_deployAvailable = false;
};

} // namespace dlion::ui
