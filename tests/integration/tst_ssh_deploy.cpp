// Deployment over a real sshd on loopback: host keys, logins, upload, start,
// a short training run over the deployed agents, stop and cleanup.
#include "cluster_fixture.h"
#include "own_data_fixture.h"
#include "sshd_fixture.h"

#include <deployer.h>
#include <python_torch.h>
#include <run_launcher.h>
#include <run_store.h>
#include <safe_file.h>

#include <QDirIterator>
#include <QTcpServer>

#include <csignal>
#include <sys/stat.h>

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

bool stopAndWait(core::Deployer &deployer, QString *message)
{
    QSignalSpy stopped(&deployer, &core::Deployer::stopped);
    deployer.stop();
    if (!stopped.wait(30000)) {
        *message = QStringLiteral("the stop did not end within 30 s");
        return false;
    }
    *message = stopped.at(0).at(1).toString();
    return stopped.at(0).at(0).toBool();
}

// A folder with exactly `mode` (the umask does not apply; sticky bit too).
bool makeDir(const QString &path, mode_t mode)
{
    return QDir().mkpath(path) && ::chmod(QFile::encodeName(path).constData(), mode) == 0;
}

std::optional<core::ClusterSpec> loadCluster(const QString &path)
{
    QString error;
    auto spec = core::ClusterSpec::load(path, &error);
    if (!spec)
        qWarning().noquote() << error;
    return spec;
}

struct LaunchResult {
    bool ok = false;
    QString message;
    QStringList log;  // "host stage: message" of the deployment, then the run's messages
};

// `request` over the hosts of `clusterFile` as dlion run does it, to the
// agents' release; `beforeJob` runs once they are deployed, before the job
// is sent.
LaunchResult launchAndWait(const QString &clusterFile, const core::JobRequest &request, const QString &runDir,
                           const std::function<void()> &beforeJob)
{
    LaunchResult r;
    auto cluster = loadCluster(clusterFile);
    if (!cluster)
        return r;
    auto deployer = std::make_unique<core::Deployer>(*cluster);
    QObject ctx;
    // Connected before the launcher connects: runs first.
    QObject::connect(deployer.get(), &core::Deployer::deployed, &ctx, beforeJob);
    QObject::connect(deployer.get(), &core::Deployer::hostProgress, &ctx,
                     [&](const QString &host, const QString &stage, const QString &m) { r.log << host + " " + stage + ": " + m; });
    core::RunLauncher launcher;
    bool released = false;
    QObject::connect(&launcher, &core::RunLauncher::message, &ctx, [&](const QString &m) { r.log << m; });
    QObject::connect(&launcher, &core::RunLauncher::finished, &ctx, [&](bool ok, const QString &m) {
        r.ok = ok;
        r.message = m;
    });
    QObject::connect(&launcher, &core::RunLauncher::failed, &ctx, [&](const QString &m) { r.message = m; });
    QObject::connect(&launcher, &core::RunLauncher::released, &ctx, [&] { released = true; });
    launcher.startRemote(request, std::move(deployer), clusterFile, {runDir, runDir + ".sqlite"});
    if (!QTest::qWaitFor([&] { return released; }, 180000))
        r.message = QStringLiteral("the run did not end within 180 s");
    return r;
}

} // namespace

class TestSshDeploy : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void unknownHostKeyIsAskedThenDeployRunAndStop();
    void cliRunOverClusterCleansUp();
    void hostsTrainOnTheirOwnData();
    void userModelTravelsToTheHosts();
    void cliStopRemovesAgentsOfADeadController();
    void cliAttachTakesOverAClusterRun();
    void sshAgentLogsIn();
    void missingLibrariesAreReportedAndNothingIsLeft();
    void changedHostKeyIsRefused();
    void wrongUserKeyGivesAuthError();
    void unreachablePortsFailClearly();
    void listenPayloadRunsNothing();
    void hostilePidFileKillsNothing();
    void sharedWorkDirIsRefused();
    void agentExitsWithoutAController();

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
    QVERIFY(makeDir(work, 0755));  // a work_dir of the user that others can read is fine
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
    struct stat runDir {};
    QVERIFY(::stat(QFile::encodeName(work + "/dlion-a").constData(), &runDir) == 0);
    QCOMPARE(runDir.st_mode & 07777, 0700u);
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

void TestSshDeploy::hostsTrainOnTheirOwnData()
{
    // Each host names its own folder in the cluster file; the two hold
    // different classes (non-iid) and each reports its own histogram.
    const QString work = m_work.filePath("own-data");
    QTemporaryDir tmp;
    const QList<test::OwnCsvData> data = {{{25, 0, 15}}, {{0, 30, 10}}};
    const QStringList dirs = {tmp.filePath("h0"), tmp.filePath("h1")};
    QJsonArray hosts;
    for (int h = 0; h < 2; ++h) {
        data[h].write(dirs[h]);
        QJsonObject host = m_sshd.host(QStringLiteral("d%1").arg(h), work);
        host.insert("data_dir", dirs[h]);
        host.insert("dataset", "csv");
        hosts.append(host);
    }
    const QString file = m_sshd.writeCluster("own-data.json", hosts, m_sshd.path("known_hosts"));
    QString output;
    QVERIFY2(test::runCli({"run", "--cluster", file, "--config", test::writeClassNamesJob(tmp.path(), 3), "--max-rounds",
                           "20", "--batch-size", "8", "--out", tmp.filePath("run"), "--store", tmp.filePath("runs.sqlite"),
                           "--quiet"},
                          120000, &output),
             qPrintable(output));
    test::expectOwnData(tmp.filePath("run"), tmp.filePath("runs.sqlite"), data, dirs);
}

void TestSshDeploy::userModelTravelsToTheHosts()
{
    // The job's own .pt model exists only on the controller: the deployer
    // uploads it into each host's dlion_models/ (checked by SHA-256) and the
    // agents load that copy. Loopback shares the file system, so the
    // controller's file is moved away before the job is sent: an agent that
    // read the job's own path would fail.
    if (test::pythonWithTorch().isEmpty())
        QSKIP("/usr/bin/python3 has no torch");
    const QString work = m_work.filePath("model");
    QTemporaryDir tmp;
    QString error;
    const QString model = test::exportExampleModel(tmp.path(), {}, &error);
    QVERIFY2(!model.isEmpty(), qPrintable(error));
    QJsonObject installed = m_sshd.host("m1", work);
    installed.insert("agent_path", qEnvironmentVariable("DLION_AGENT"));  // no agent upload; the model still goes
    const QString file = m_sshd.writeCluster("model.json", {m_sshd.host("m0", work), installed}, m_sshd.path("known_hosts"));
    const auto request = core::buildJob({}, QJsonObject{{"model", model}, {"dataset", "fashion-mnist"}, {"workers", 2},
                                                        {"budget.max_rounds", 20}, {"eval_samples", 200}}, &error);
    QVERIFY2(request, qPrintable(error));
    const QString sha = request->spec.modelSha256;
    const QString moved = model + ".moved";
    const LaunchResult first = launchAndWait(file, *request, tmp.filePath("run1"), [&] { QFile::rename(model, moved); });
    QVERIFY2(first.ok, qPrintable(first.message + "\n" + first.log.join('\n')));
    QVERIFY(!QFileInfo::exists(model));
    QVERIFY(QFileInfo::exists(tmp.filePath("run1/model.pt")));  // the trained module came back
    const QString copy = QFileInfo(work + "/dlion_models/" + sha + ".pt").canonicalFilePath();
    QVERIFY2(!copy.isEmpty(), qPrintable(first.log.join('\n')));
    QCOMPARE(files::sha256Hex(copy, &error), std::optional<QString>(sha));
    QCOMPARE(QFile(copy).permissions() & (QFile::ReadOther | QFile::ReadGroup), QFile::Permissions());
    QVERIFY2(first.log.filter(" model: uploading the model " + model).size() >= 1, qPrintable(first.log.join('\n')));
    QVERIFY(!QFileInfo::exists(work + "/dlion-m0") && !QFileInfo::exists(work + "/dlion-m1"));  // the copy stays

    // The next run finds the copies by their hash and uploads nothing; one
    // corrupted after the deployment fails the job, naming both hashes.
    QVERIFY(QFile::rename(moved, model));
    QString corrupted;
    const LaunchResult second = launchAndWait(file, *request, tmp.filePath("run2"), [&] {
        QFile f(copy);
        if (f.open(QIODevice::ReadWrite) && f.seek(100) && f.write("corrupt") == 7)
            f.close();
        corrupted = files::sha256Hex(copy, &error).value_or(QString());
    });
    QVERIFY(!second.ok);
    QCOMPARE(second.log.filter(" model: the model is on the host already: " + copy).size(), 2);
    QVERIFY(!corrupted.isEmpty() && corrupted != sha);
    QVERIFY2(second.message.contains("model " + copy + " has SHA-256 " + corrupted + ", but the job expects " + sha),
             qPrintable(second.message));

    // A corrupted copy found at deployment is replaced.
    const LaunchResult third = launchAndWait(file, *request, tmp.filePath("run3"), [] {});
    QVERIFY2(third.ok, qPrintable(third.message + "\n" + third.log.join('\n')));
    QVERIFY2(third.log.filter(" model: uploading the model " + model).size() >= 1, qPrintable(third.log.join('\n')));
    QCOMPARE(files::sha256Hex(copy, &error), std::optional<QString>(sha));
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

void TestSshDeploy::listenPayloadRunsNothing()
{
    const QString marker = m_work.filePath("listen-marker");
    const QString work = m_work.filePath("listen");
    // Each would run `touch marker` in the remote shell that starts the agent.
    const QStringList payloads{"fe80::1%$(touch " + marker + ")", "127.0.0.1; touch " + marker + "; true"};
    QJsonArray hosts;
    for (int i = 0; i < payloads.size(); ++i)
        hosts.append(m_sshd.host(QStringLiteral("s%1").arg(i), work));
    auto cluster = loadCluster(m_sshd.writeCluster("listen.json", hosts, m_sshd.path("known_hosts")));
    QVERIFY(cluster);
    for (int i = 0; i < payloads.size(); ++i) {
        QJsonObject host = m_sshd.host("s", work);
        host["listen"] = payloads[i];
        QString error;
        QVERIFY(!core::ClusterSpec::load(m_sshd.writeCluster("listen-bad.json", {host}, m_sshd.path("known_hosts")), &error));
        QVERIFY2(error.contains("host \"s\": field \"listen\" must be a numeric IP address"), qPrintable(error));
        cluster->hosts[i].listen = payloads[i];  // as a caller that skips the file check
    }
    core::Deployer deployer(*cluster);
    QHash<QString, QString> failures;
    connect(&deployer, &core::Deployer::hostFailed, this, [&](const QString &h, const QString &why) { failures[h] = why; });
    QVERIFY(!deployAndWait(deployer, protocol::handshake::makeSecret()).ok);
    for (const core::ClusterHost &h : std::as_const(cluster->hosts))
        QVERIFY2(failures[h.name].contains("the agent exited at start") && failures[h.name].contains("listen"),
                 qPrintable(failures[h.name]));
    QVERIFY(!QFileInfo::exists(marker));
    QCOMPARE(processesUnder(work), 0);
}

void TestSshDeploy::hostilePidFileKillsNothing()
{
    QProcess decoy;
    decoy.start("sleep", {"60"});
    QVERIFY(decoy.waitForStarted());
    const QString marker = m_work.filePath("pid-marker");
    // The first as `-9 -1 /proc/self` (kill every process), with the decoy in
    // place of -1 so that a regression kills only the decoy.
    const QStringList pidFiles{QStringLiteral("-9 %1 /proc/self").arg(decoy.processId()), "1; touch " + marker};
    const QString work = m_work.filePath("pid");
    QVERIFY(makeDir(work, 0700));
    QJsonArray hosts;
    for (int i = 0; i < pidFiles.size(); ++i)
        hosts.append(m_sshd.host(QStringLiteral("p%1").arg(i), work));
    auto cluster = loadCluster(m_sshd.writeCluster("pid.json", hosts, m_sshd.path("known_hosts")));
    QVERIFY(cluster);
    auto plant = [&] {
        for (int i = 0; i < pidFiles.size(); ++i) {
            QFile f(QStringLiteral("%1/dlion-p%2/agent.pid").arg(work).arg(i));
            if (!makeDir(QFileInfo(f).path(), 0700) || !f.open(QIODevice::WriteOnly) || f.write(pidFiles[i].toUtf8()) <= 0)
                return false;
        }
        return true;
    };
    core::Deployer deployer(*cluster);
    QString message;
    QVERIFY(plant());  // stop: no agent to kill, the folders go
    QVERIFY2(stopAndWait(deployer, &message), qPrintable(message));
    QVERIFY(!QFileInfo::exists(work + "/dlion-p0") && !QFileInfo::exists(work + "/dlion-p1"));
    QVERIFY(plant());  // deploy: no earlier agent there
    const DeployResult r = deployAndWait(deployer, protocol::handshake::makeSecret());
    QVERIFY2(r.ok, qPrintable(r.message));
    QVERIFY2(stopAndWait(deployer, &message), qPrintable(message));
    QVERIFY(!QFileInfo::exists(marker));
    QVERIFY2(!decoy.waitForFinished(200), "the decoy process was killed");
    decoy.kill();
    decoy.waitForFinished(5000);
}

void TestSshDeploy::sharedWorkDirIsRefused()
{
    struct Shared {
        mode_t mode;
        const char *workDir;  // in the shared folder
    };
    const Shared cases[] = {{0777, ""}, {0770, ""}, {01777, ""}, {0757, "/dlion"}};  // the last: writable above work_dir
    QJsonArray hosts;
    for (int i = 0; i < int(std::size(cases)); ++i) {
        const QString shared = m_work.filePath(QStringLiteral("shared%1").arg(i));
        QVERIFY(makeDir(shared, cases[i].mode));
        hosts.append(m_sshd.host(QStringLiteral("w%1").arg(i), shared + cases[i].workDir));
    }
    auto cluster = loadCluster(m_sshd.writeCluster("shared.json", hosts, m_sshd.path("known_hosts")));
    QVERIFY(cluster);
    core::Deployer deployer(*cluster);
    QHash<QString, QString> failures;
    connect(&deployer, &core::Deployer::hostFailed, this, [&](const QString &h, const QString &why) { failures[h] = why; });
    QVERIFY(!deployAndWait(deployer, protocol::handshake::makeSecret()).ok);
    for (int i = 0; i < int(std::size(cases)); ++i) {
        const core::ClusterHost &h = cluster->hosts[i];
        const QString shared = QFileInfo(m_work.filePath(QStringLiteral("shared%1").arg(i))).canonicalFilePath();
        const QString expected = QStringLiteral("host \"%1\": work_dir %2 is not safe: %3 is owned by root with mode %4 "
                                                "(writable by other users)")
                                     .arg(h.name, h.workDir, shared, QString::number(cases[i].mode, 8));
        QVERIFY2(failures[h.name].startsWith(expected) && failures[h.name].contains("e.g. ~/dlion"), qPrintable(failures[h.name]));
        QVERIFY(!QFileInfo::exists(h.workDir + "/dlion-" + h.name));
    }
}

void TestSshDeploy::agentExitsWithoutAController()
{
    const QString work = m_work.filePath("gone");
    auto cluster = loadCluster(m_sshd.writeCluster("gone.json", {m_sshd.host("e", work)}, m_sshd.path("known_hosts")));
    QVERIFY(cluster);
    core::Deployer deployer(*cluster);
    deployer.setAgentGrace(1);
    const DeployResult r = deployAndWait(deployer, protocol::handshake::makeSecret());
    QVERIFY2(r.ok, qPrintable(r.message));
    // Its check connection has closed and no controller comes: the agent goes by itself.
    QTRY_COMPARE_WITH_TIMEOUT(processesUnder(work), 0, 15000);
    QString message;
    QVERIFY2(stopAndWait(deployer, &message), qPrintable(message));
    QVERIFY(!QFileInfo::exists(work + "/dlion-e"));
}

QTEST_GUILESS_MAIN(TestSshDeploy)
#include "tst_ssh_deploy.moc"
