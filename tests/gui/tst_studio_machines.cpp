// "My machines" against a real sshd on loopback: import the host from an
// OpenSSH client config, test the connection (confirming the unknown host
// key in the dialog that shows its fingerprint), and check a deployment.
#include "../integration/sshd_fixture.h"

#include <cluster_page.h>
#include <hosts_form.h>
#include <main_window.h>

#include <QAbstractButton>
#include <QApplication>
#include <QMessageBox>
#include <QPushButton>
#include <QTableWidget>

using namespace dlion;

class TestStudioMachines : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void importTestAndDeploy();

private:
    test::SshdFixture m_sshd;
};

void TestStudioMachines::initTestCase()
{
    const QString why = test::SshdFixture::skipReason();
    if (!why.isEmpty())
        QSKIP(qPrintable(why));
    QString error;
    QVERIFY2(m_sshd.start(&error), qPrintable(error));
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("DLionTest"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_studio_machines"));
    QSettings().clear();
}

void TestStudioMachines::importTestAndDeploy()
{
    ui::MainWindow window;
    window.resize(1400, 900);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    window.showPage(ui::MainWindow::Page::Cluster);
    auto *machines = window.findChild<QAbstractButton *>(QStringLiteral("modeMachines"));
    QTest::mouseClick(machines, Qt::LeftButton, {}, QPoint(8, machines->height() / 2));  // on the indicator
    QCOMPARE(window.clusterPage()->mode(), ui::ClusterPage::Mode::Machines);
    QVERIFY(!window.startAction()->isEnabled());  // no machine yet

    QFile config(m_sshd.path(QStringLiteral("ssh_config")));
    QVERIFY(config.open(QIODevice::WriteOnly));
    config.write(QStringLiteral("Host *\n  User root\n\nHost lab-1\n  HostName 127.0.0.1\n  Port %1\n  IdentityFile %2\n\n"
                                "Host *.example.org\n  User nobody\n")
                     .arg(m_sshd.port())
                     .arg(m_sshd.path(QStringLiteral("user_key")))
                     .toUtf8());
    config.close();
    ui::HostsForm *hosts = window.clusterPage()->hostsForm();
    QString error;
    QCOMPARE(hosts->importSshConfig(config.fileName(), &error), 1);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QCOMPARE(hosts->hosts().first().value("user").toString(), QStringLiteral("root"));
    QCOMPARE(hosts->hosts().first().value("port").toInt(), int(m_sshd.port()));
    QCOMPARE(hosts->hosts().first().value("work_dir").toString(), QStringLiteral("~/dlion"));
    QList<QJsonObject> entries = hosts->hosts();
    entries[0].insert("work_dir", m_sshd.path(QStringLiteral("remote")));  // keep the deployment inside the fixture
    hosts->setHosts(entries);
    // An empty known-hosts file: the key is unknown and must be confirmed.
    const QString knownHosts = m_sshd.path(QStringLiteral("gui_known_hosts"));
    hosts->setKnownHostsFile(knownHosts);
    QVERIFY2(window.validationMessage().isEmpty(), qPrintable(window.validationMessage()));
    QVERIFY(window.startAction()->isEnabled());

    // Test connection: the host-key dialog shows the fingerprint; accept it.
    QString dialogText;
    QTimer answer;
    connect(&answer, &QTimer::timeout, this, [&] {
        auto *box = qobject_cast<QMessageBox *>(QApplication::activeModalWidget());
        if (!box)
            return;
        dialogText = box->text() + box->informativeText();
        box->button(QMessageBox::Yes)->click();
    });
    answer.start(50);
    hosts->selectRow(0);
    QTest::mouseClick(hosts->findChild<QPushButton *>(QStringLiteral("test-connection")), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(hosts->status(0) != ui::HostsForm::Status::Busy, 30000);
    QVERIFY2(dialogText.contains(m_sshd.hostKeyFingerprint()), qPrintable(dialogText));
    QCOMPARE(hosts->status(0), ui::HostsForm::Status::Ok);
    QFile recorded(knownHosts);
    QVERIFY(recorded.open(QIODevice::ReadOnly));
    QVERIFY(!recorded.readAll().isEmpty());

    // Deploy: uploads and starts the agent, proves it answers, removes it.
    QSignalSpy checked(window.controller(), &ui::RunController::deploymentChecked);
    QTest::mouseClick(hosts->findChild<QPushButton *>(QStringLiteral("deploy")), Qt::LeftButton);
    QVERIFY(checked.wait(120000));
    QVERIFY2(checked.first().at(0).toBool(), qPrintable(checked.first().at(1).toString()));
    QCOMPARE(hosts->status(0), ui::HostsForm::Status::Ok);
    window.grab().save(QDir(QStringLiteral(DLION_ARTIFACTS_DIR)).filePath(QStringLiteral("setup-machines.png")));
}

QTEST_MAIN(TestStudioMachines)
#include "tst_studio_machines.moc"
