// Deployment over a real sshd on loopback: host keys, logins, upload, start,
// a short training run over the deployed agents, stop and cleanup.
#include "cluster_fixture.h"
#include "sshd_fixture.h"

#include <deployer.h>
#include <run_store.h>

#include <QDirIterator>
#include <QTcpServer>

#include <csignal>

using namespace dlion;

namespace {

// Processes whose command line mentions `path` (the agents we deployed there).
int processesUnder(const QString &path)
{
    int n = 0;
    for (const QString &pid : QDir("/proc").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        QFile f("/proc/" + pid + "/cmdline");
        if (pid.toInt() > 0 && f.open(QIODevice::ReadOnly) && f.readAll().contains(path.toUtf8()))
            ++n;
    }
    return n;
}

struct DeployResult {
    bool ok = false;
    QString message;
    QList<core::AgentEndpoint> endpoints;
};

DeployResult deployAndWait(core::Deployer &deployer, const QByteArray &secret)
{
    DeployResult r;
    bool done = false;
    QObject ctx;
    QObject::connect(&deployer, &core::Deployer::deployed, &ctx, [&](const QList<core::AgentEndpoint> &e) {
        r = {true, {}, e};
        done = true;
    });
    QObject::connect(&deployer, &core::Deployer::failed, &ctx, [&](const QString &m) {
        r = {false, m, {}};
        done = true;
    });
    deployer.deploy(secret);
    if (!QTest::qWaitFor([&] { return done; }, 90000))
        r.message = QStringLiteral("the deployment did not end within 90 s");
    return r;
}

std::optional<core::ClusterSpec> loadCluster(const QString &path)
{
    QString error;
    auto spec = core::ClusterSpec::load(path, &error);
    if (!spec)
        qWarning().noquote() << error;
    return spec;
}

} // namespace

class TestSshDeploy : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void unknownHostKeyIsAskedThenDeployRunAndStop();
    void cliRunOverClusterCleansUp();
    void cliStopRemovesAgentsOfADeadController();
    void cliAttachTakesOverAClusterRun();
    void sshAgentLogsIn();
    void missingLibrariesAreReportedAndNothingIsLeft();
    void changedHostKeyIsRefused();
    void wrongUserKeyGivesAuthError();
    void unreachablePortsFailClearly();

private:
    test::SshdFixture m_sshd;
    QTemporaryDir m_work;
};

void TestSshDeploy::initTestCase()
{
    const QString why = test::SshdFixture::skipReason();
    if (!why.isEmpty())
        QSKIP(qPrintable(why));
    QString error;
    QVERIFY2(m_sshd.start(&error), qPrintable(error));
}

void TestSshDeploy::unknownHostKeyIsAskedThenDeployRunAndStop()
{
    const QString work = m_work.filePath("api");
    const QString knownHosts = m_work.filePath("fresh_known_hosts");  // does not exist yet
    auto cluster = loadCluster(m_sshd.writeCluster("api.json", {m_sshd.host("a", work), m_sshd.host("b", work)}, knownHosts));
    QVERIFY(cluster);
    core::Deployer deployer(*cluster);
    QStringList asked;
    connect(&deployer, &core::Deployer::hostKeyUnknown, this, [&](const QString &host, const QString &fingerprint) {
        asked << fingerprint;
        deployer.answerHostKey(host, true);
    });
    QSignalSpy progress(&deployer, &core::Deployer::hostProgress);
    const QByteArray secret = protocol::handshake::makeSecret();
    const DeployResult deployed = deployAndWait(deployer, secret);
    QVERIFY2(deployed.ok, qPrintable(deployed.message));
    // Asked with the server's real fingerprint (once per host, unless the
    // other host had recorded the key by the time this one checked).
    QVERIFY(asked.size() == 1 || asked.size() == 2);
    for (const QString &fingerprint : std::as_const(asked))
        QCOMPARE(fingerprint, "ssh-ed25519 " + m_sshd.hostKeyFingerprint());
    QVERIFY(QFile(knownHosts).size() > 0);  // accepted keys are recorded
    QCOMPARE(deployed.endpoints.size(), 2);
    QCOMPARE(processesUnder(work), 2);
    QVERIFY(QFileInfo(work + "/dlion-a/dlion-agent").isExecutable());
    QCOMPARE(QFile(work + "/dlion-a/secret").permissions() & (QFile::ReadOther | QFile::ReadGroup), QFile::Permissions());
    QStringList stages;
    for (const auto &args : std::as_const(progress))
        stages << args.at(1).toString();
    for (const char *stage : {"connect", "preflight", "upload", "libraries", "start", "ready"})
        QVERIFY2(stages.contains(stage), stage);

    // A short training job over the deployed agents.
    protocol::JobSpec job;
    job.dataset = "synthetic";
    job.model = "mlp";
    job.budget.maxRounds = 30;
    core::RunSession session;
    QSignalSpy finished(&session, &core::RunSession::finished);
    session.start(job, deployed.endpoints, secret, deployed.endpoints[0].host, quint16(cluster->rendezvousPort));
    QVERIFY(finished.wait(60000));
    QVERIFY2(finished.at(0).at(0).toBool(), qPrintable(finished.at(0).at(1).toString()));
    QCOMPARE(session.data().rounds(1).size(), 30);

    QSignalSpy stopped(&deployer, &core::Deployer::stopped);
    deployer.stop();
    QVERIFY(stopped.wait(30000));
    QVERIFY2(stopped.at(0).at(0).toBool(), qPrintable(stopped.at(0).at(1).toString()));
    QCOMPARE(processesUnder(work), 0);
    QVERIFY(!QFileInfo::exists(work + "/dlion-a") && !QFileInfo::exists(work + "/dlion-b"));
}

void TestSshDeploy::cliRunOverClusterCleansUp()
{
    const QString work = m_work.filePath("cli");
    const QString file = m_sshd.writeCluster("cli.yaml.json", {m_sshd.host("n0", work), m_sshd.host("n1", work)},
                                             m_sshd.path("known_hosts"));
    QTemporaryDir out;
    QProcess p;
    p.start(qEnvironmentVariable("DLION_CLI"), {"run", "--cluster", file, "--dataset", "synthetic", "--model", "mlp",
                                               "--max-rounds", "40", "--out", out.path(), "--quiet"});
    QVERIFY(p.waitForFinished(120000));
    const QString log = QString::fromUtf8(p.readAllStandardOutput() + p.readAllStandardError());
    QVERIFY2(p.exitCode() == 0, qPrintable(log));
    QFile summary(QDir(out.path()).filePath("summary.json"));
    QVERIFY(summary.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(summary.readAll()).object();
    QCOMPARE(s.value("workers").toInt(), 2);
    QCOMPARE(s.value("rounds").toArray().at(1).toArray().size(), 40);
    QCOMPARE(processesUnder(work), 0);
    QVERIFY2(!QFileInfo::exists(work + "/dlion-n0") && !QFileInfo::exists(work + "/dlion-n1"), qPrintable(log));
}

void TestSshDeploy::cliStopRemovesAgentsOfADeadController()
{
    const QString work = m_work.filePath("orphans");
    const QString file = m_sshd.writeCluster("orphans.json", {m_sshd.host("o", work)}, m_sshd.path("known_hosts"));
    QProcess check;  // dlion deploy: a full deployment that cleans up after itself
    check.start(qEnvironmentVariable("DLION_CLI"), {"deploy", "--cluster", file});
    QVERIFY(check.waitForFinished(60000));
    QVERIFY2(check.exitCode() == 0, check.readAllStandardError().constData());
    QVERIFY(check.readAllStandardOutput().contains("deployment check passed on 1 host"));
    QVERIFY(!QFileInfo::exists(work + "/dlion-o"));
    {
        auto cluster = loadCluster(file);
        QVERIFY(cluster);
        core::Deployer deployer(*cluster);
        QVERIFY(deployAndWait(deployer, protocol::handshake::makeSecret()).ok);
    }  // the controller goes away without stopping: the agent stays
    QCOMPARE(processesUnder(work), 1);
    // A second deployment refuses to start next to it.
    auto cluster = loadCluster(file);
    core::Deployer again(*cluster);
    const DeployResult refused = deployAndWait(again, protocol::handshake::makeSecret());
    QVERIFY(!refused.ok);
    QVERIFY2(refused.message.contains("still running") && refused.message.contains("dlion stop"), qPrintable(refused.message));

    QProcess p;
    p.start(qEnvironmentVariable("DLION_CLI"), {"stop", "--cluster", file});
    QVERIFY(p.waitForFinished(60000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    QCOMPARE(processesUnder(work), 0);
    QVERIFY(!QFileInfo::exists(work + "/dlion-o"));
}

void TestSshDeploy::cliAttachTakesOverAClusterRun()
{
    const QString work = m_work.filePath("takeover");
    const QString file = m_sshd.writeCluster("takeover.json", {m_sshd.host("t0", work), m_sshd.host("t1", work)},
                                             m_sshd.path("known_hosts"));
    QTemporaryDir out;
    const QString runDir = out.filePath("run"), store = out.filePath("runs.sqlite");
    QProcess p;
    p.start(qEnvironmentVariable("DLION_CLI"), {"run", "--cluster", file, "--dataset", "synthetic", "--model", "mlp", "--seconds",
                                               "20", "--out", runDir, "--store", store, "--quiet"});
    QVERIFY(p.waitForStarted());
    QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(QDir(runDir).filePath("attach.json")), 90000);
    ::kill(pid_t(p.processId()), SIGKILL);  // the control center dies; the remote agents train on
    QVERIFY(p.waitForFinished(10000));
    QCOMPARE(processesUnder(work), 2);

    QProcess a;
    a.start(qEnvironmentVariable("DLION_CLI"), {"attach", runDir, "--quiet"});
    QVERIFY(a.waitForFinished(120000));
    const QString said = QString::fromUtf8(a.readAllStandardOutput() + a.readAllStandardError());
    QVERIFY2(a.exitCode() == 0 && said.contains("run finished"), qPrintable(said));
    QVERIFY2(said.contains("dlion stop --cluster " + file), qPrintable(said));
    core::RunStore s;
    QVERIFY2(s.open(store, core::RunStore::Mode::ReadOnly), qPrintable(s.errorString()));
    const auto run = s.loadRun(1);
    QVERIFY2(run, qPrintable(s.errorString()));
    QCOMPARE(run->info.status, QStringLiteral("finished"));
    QVERIFY(run->data.rounds(1).size() > 5);
    QTRY_COMPARE_WITH_TIMEOUT(processesUnder(work), 0, 30000);  // told to shut down at the end

    QProcess stop;  // what the hint says: the agents' folders go too
    stop.start(qEnvironmentVariable("DLION_CLI"), {"stop", "--cluster", file});
    QVERIFY(stop.waitForFinished(60000));
    QVERIFY2(stop.exitCode() == 0, stop.readAllStandardError().constData());
    QVERIFY(!QFileInfo::exists(work + "/dlion-t0") && !QFileInfo::exists(work + "/dlion-t1"));
}

void TestSshDeploy::sshAgentLogsIn()
{
    // A private ssh-agent holding the user key; auth: agent asks it to sign.
    const QString socket = m_work.filePath("agent.sock");
    QProcess agent;
    agent.start("ssh-agent", {"-D", "-a", socket});
    QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(socket), 10000);
    const QByteArray saved = qgetenv("SSH_AUTH_SOCK");
    qputenv("SSH_AUTH_SOCK", socket.toUtf8());
    QProcess add;
    add.start("ssh-add", {m_sshd.path("user_key")});
    QVERIFY(add.waitForFinished(10000) && add.exitCode() == 0);
    const QString work = m_work.filePath("agent-auth");
    QJsonObject host = m_sshd.host("g", work);
    host["auth"] = "agent";
    host.remove("key_file");
    auto cluster = loadCluster(m_sshd.writeCluster("agent.json", {host}, m_sshd.path("known_hosts")));
    QVERIFY(cluster);
    core::Deployer deployer(*cluster);
    const DeployResult r = deployAndWait(deployer, protocol::handshake::makeSecret());
    QSignalSpy stopped(&deployer, &core::Deployer::stopped);
    deployer.stop();
    const bool stoppedOk = stopped.wait(30000) && stopped.at(0).at(0).toBool();
    qputenv("SSH_AUTH_SOCK", saved);
    agent.kill();
    agent.waitForFinished(5000);
    QVERIFY2(r.ok, qPrintable(r.message));
    QVERIFY(stoppedOk);
    QCOMPARE(processesUnder(work), 0);
}

void TestSshDeploy::missingLibrariesAreReportedAndNothingIsLeft()
{
    // An agent whose LibTorch dependency has another name: as on a host
    // without the runtime packages, ldd there cannot resolve it.
    QFile original(qEnvironmentVariable("DLION_AGENT"));
    QVERIFY(original.open(QIODevice::ReadOnly));
    QByteArray elf = original.readAll();
    QVERIFY(elf.contains("libtorch.so.1.13"));
    elf.replace("libtorch.so.1.13", "libtorcX.so.1.13");
    QFile patched(m_work.filePath("dlion-agent-without-torch"));
    QVERIFY(patched.open(QIODevice::WriteOnly) && patched.write(elf) == elf.size());
    patched.close();
    patched.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);

    const QString work = m_work.filePath("nolibs");
    auto cluster = loadCluster(m_sshd.writeCluster("nolibs.json", {m_sshd.host("l", work)}, m_sshd.path("known_hosts")));
    QVERIFY(cluster);
    core::Deployer deployer(*cluster);
    deployer.setAgentProgram(patched.fileName());
    const DeployResult r = deployAndWait(deployer, protocol::handshake::makeSecret());
    QVERIFY(!r.ok);
    QVERIFY2(r.message.contains("missing there: libtorcX.so.1.13; install the packages"), qPrintable(r.message));
    QVERIFY(QFileInfo::exists(work));  // the work folder stays, the agent's own folder is gone
    QVERIFY(!QFileInfo::exists(work + "/dlion-l"));
}

void TestSshDeploy::changedHostKeyIsRefused()
{
    const QString work = m_work.filePath("mitm");
    auto cluster = loadCluster(m_sshd.writeCluster("mitm.json", {m_sshd.host("m", work)}, m_sshd.path("wrong_known_hosts")));
    QVERIFY(cluster);
    core::Deployer deployer(*cluster);
    deployer.setHostKeyPolicy(core::Deployer::HostKeyPolicy::AcceptNew);  // even so, a changed key is refused
    const DeployResult r = deployAndWait(deployer, protocol::handshake::makeSecret());
    QVERIFY(!r.ok);
    QVERIFY2(r.message.contains("REFUSED") && r.message.contains("does not match") && r.message.contains("host \"m\""),
             qPrintable(r.message));
    QVERIFY(!QFileInfo::exists(work));  // never logged in
}

void TestSshDeploy::wrongUserKeyGivesAuthError()
{
    const QString work = m_work.filePath("badkey");
    QJsonObject host = m_sshd.host("k", work);
    host["key_file"] = m_sshd.path("other_user_key");
    auto cluster = loadCluster(m_sshd.writeCluster("badkey.json", {host}, m_sshd.path("known_hosts")));
    QVERIFY(cluster);
    core::Deployer deployer(*cluster);
    const DeployResult r = deployAndWait(deployer, protocol::handshake::makeSecret());
    QVERIFY(!r.ok);
    QVERIFY2(r.message.contains("authentication failed") && r.message.contains("user root"), qPrintable(r.message));
    QVERIFY(!QFileInfo::exists(work));
}

void TestSshDeploy::unreachablePortsFailClearly()
{
    // A port that accepts TCP but never speaks SSH: the connect timeout applies.
    QTcpServer silent;
    QVERIFY(silent.listen(QHostAddress::LocalHost));
    QJsonObject mute = m_sshd.host("mute", m_work.filePath("x"));
    mute["port"] = silent.serverPort();
    QJsonObject closed = m_sshd.host("closed", m_work.filePath("x"));
    closed["port"] = core::pickFreePort();
    auto cluster = loadCluster(m_sshd.writeCluster("down.json", {mute, closed}, m_sshd.path("known_hosts"), 2));
    QVERIFY(cluster);
    core::Deployer deployer(*cluster);
    QHash<QString, QString> failures;
    connect(&deployer, &core::Deployer::hostFailed, this, [&](const QString &h, const QString &why) { failures[h] = why; });
    QElapsedTimer clock;
    clock.start();
    QVERIFY(!deployAndWait(deployer, protocol::handshake::makeSecret()).ok);
    QVERIFY(clock.elapsed() < 15000);
    QVERIFY2(failures["mute"].contains("timed out after 2 s"), qPrintable(failures["mute"]));
    QVERIFY2(failures["closed"].contains("cannot connect") && failures["closed"].contains("refused", Qt::CaseInsensitive),
             qPrintable(failures["closed"]));
}

QTEST_GUILESS_MAIN(TestSshDeploy)
#include "tst_ssh_deploy.moc"
