// Cluster files: what a valid one yields, and messages that name the host
// and the field for every kind of mistake; where a run's rendezvous and
// folder go.
#include <cluster_spec.h>
#include <run_launcher.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QTcpServer>
#include <QTemporaryDir>
#include <QtTest>

using namespace dlion::core;

class TestClusterSpec : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void yamlFileLoads();
    void jobOverridesFollowTheHosts();
    void mistakesNameHostAndField_data();
    void mistakesNameHostAndField();
    void rendezvousPortRule();
    void runFolderIsCreatedOrRefused();
};

void TestClusterSpec::yamlFileLoads()
{
    QTemporaryDir dir;
    QFile f(dir.filePath("lab.yaml"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("name: lab\nrendezvous_port: 29600\nagent_port: 7070\nknown_hosts: ~/kh\nhosts:\n"
            "  - {name: edge-1, address: 10.0.0.5, user: alice, auth: key, key_file: ~/.ssh/id_ed25519,\n"
            "     work_dir: /tmp/dlion, slowdown: 2}\n"
            "  - {address: edge-2.lan, port: 2222, user: bob, auth: password, work_dir: ~/dl, agent_port: 0,\n"
            "     listen: 192.168.1.7}\n");
    f.close();
    QString error;
    const auto spec = ClusterSpec::load(f.fileName(), &error);
    QVERIFY2(spec, qPrintable(error));
    QCOMPARE(spec->name, QString("lab"));
    QCOMPARE(spec->rendezvousPort, 29600);
    QCOMPARE(spec->knownHosts, QDir::homePath() + "/kh");
    QCOMPARE(spec->hosts.size(), 2);
    const ClusterHost &a = spec->hosts[0], &b = spec->hosts[1];
    QCOMPARE(a.auth, SshAuth::KeyFile);
    QCOMPARE(a.keyFile, QDir::homePath() + "/.ssh/id_ed25519");
    QCOMPARE(a.agentPort, 7070);  // the cluster default
    QCOMPARE(a.slowdown, 2.0);
    QCOMPARE(b.name, QString("host-2"));
    QCOMPARE(b.port, 2222);
    QCOMPARE(b.auth, SshAuth::Password);
    QCOMPARE(b.agentPort, 0);
    QCOMPARE(b.workDir, QString("~/dl"));  // expanded on the host, not here
    QCOMPARE(b.listen, QString("192.168.1.7"));

    for (const char *listen : {"::1", "fe80::1%eth0", "fe80::1%enp3s0.100"}) {
        const QJsonObject host{{"address", "h"}, {"user", "u"}, {"work_dir", "/w"}, {"listen", listen}};
        const auto scoped = ClusterSpec::fromJson(QJsonObject{{"hosts", QJsonArray{host}}}, &error);
        QVERIFY2(scoped && scoped->hosts[0].listen == listen, qPrintable(error));
    }
}

void TestClusterSpec::jobOverridesFollowTheHosts()
{
    auto host = [](const char *name, const QJsonObject &extra) {
        QJsonObject o{{"name", name}, {"address", "h"}, {"user", "u"}, {"work_dir", "/w"}};
        for (auto it = extra.begin(); it != extra.end(); ++it)
            o.insert(it.key(), it.value());
        return o;
    };
    QString error;
    const auto plain = ClusterSpec::fromJson(QJsonObject{{"hosts", QJsonArray{host("a", {}), host("b", {})}}}, &error);
    QVERIFY2(plain, qPrintable(error));
    QCOMPARE(plain->jobOverrides(), (QJsonObject{{"workers", 2}}));

    const auto shaped = ClusterSpec::fromJson(
        QJsonObject{{"hosts", QJsonArray{host("a", {{"link_mbps", 40}}), host("b", {{"slowdown", 4}, {"link_mbps", 10}}),
                                         host("c", {})}}},
        &error);
    QVERIFY2(shaped, qPrintable(error));
    const QJsonObject o = shaped->jobOverrides();
    QCOMPARE(o.value("workers").toInt(), 3);
    QCOMPARE(o.value("slowdown").toArray(), (QJsonArray{1, 4, 1}));
    // A link runs at its slower end.
    QCOMPARE(o.value("emulation.links").toArray(),
             (QJsonArray{QJsonArray{0, 10, 40}, QJsonArray{10, 0, 10}, QJsonArray{40, 10, 0}}));
    const auto twoFree = ClusterSpec::fromJson(
        QJsonObject{{"hosts", QJsonArray{host("a", {{"link_mbps", 40}}), host("b", {}), host("c", {})}}}, &error);
    QVERIFY2(twoFree, qPrintable(error));
    QCOMPARE(twoFree->jobOverrides().value("emulation.links").toArray().at(1).toArray().at(2).toDouble(), 100000.0);
    // One host naming its data makes every host train on its own.
    const auto ownData = ClusterSpec::fromJson(
        QJsonObject{{"hosts", QJsonArray{host("a", {{"data_dir", "/d/a"}, {"dataset", "csv"}}), host("b", {})}}}, &error);
    QVERIFY2(ownData, qPrintable(error));
    QCOMPARE(ownData->jobOverrides().value("worker_data").toArray(),
             (QJsonArray{QJsonObject{{"data_dir", "/d/a"}, {"dataset", "csv"}}, QJsonObject{}}));
}

void TestClusterSpec::mistakesNameHostAndField_data()
{
    QTest::addColumn<QJsonObject>("host");
    QTest::addColumn<QString>("expected");
    const QJsonObject ok{{"name", "edge-2"}, {"address", "10.0.0.6"}, {"user", "u"}, {"work_dir", "/tmp/d"}};
    auto with = [&](const char *key, const QJsonValue &v) {
        QJsonObject o = ok;
        if (v.isUndefined())
            o.remove(key);
        else
            o.insert(key, v);
        return o;
    };
    QTest::newRow("port") << with("port", 70000) << "host \"edge-2\": field \"port\" must be a whole number from 1 to 65535";
    QTest::newRow("address") << with("address", QJsonValue::Undefined) << "host \"edge-2\": field \"address\" is missing";
    QTest::newRow("auth") << with("auth", "kerberos") << "host \"edge-2\": field \"auth\" is \"kerberos\"; allowed: key, agent, password";
    QTest::newRow("key_file") << with("auth", "key") << "host \"edge-2\": field \"key_file\" is missing";
    QTest::newRow("password") << with("password", "hunter2") << "host \"edge-2\": field \"password\" is not allowed";
    QTest::newRow("work_dir") << with("work_dir", "rel/dir") << "host \"edge-2\": field \"work_dir\" must be an absolute path";
    QTest::newRow("listen") << with("listen", "eth0") << "host \"edge-2\": field \"listen\" must be a numeric IP";
    // Text the remote shell that starts the agent would run.
    QTest::newRow("listen scope") << with("listen", "fe80::1%$(touch /tmp/dlion-marker)")
                                  << "host \"edge-2\": field \"listen\" must be a numeric IP";
    QTest::newRow("listen command") << with("listen", "127.0.0.1; touch /tmp/dlion-marker")
                                    << "host \"edge-2\": field \"listen\" must be a numeric IP";
    QTest::newRow("name") << with("name", "a b") << "host \"a b\": field \"name\" may use only";
    QTest::newRow("typo") << with("adress", "x") << "host \"edge-2\": field \"adress\" is not a cluster field";
    QTest::newRow("link_mbps") << with("link_mbps", -1) << "host \"edge-2\": field \"link_mbps\" must be a number from 0.01";
    QTest::newRow("slowdown") << with("slowdown", 0.5) << "host \"edge-2\": field \"slowdown\" must be a number from 1";
    QTest::newRow("data_dir") << with("data_dir", "data") << "host \"edge-2\": field \"data_dir\" must be an absolute path";
    QTest::newRow("dataset") << with("dataset", "parquet") << "host \"edge-2\": field \"dataset\" is \"parquet\"; allowed:";
}

void TestClusterSpec::mistakesNameHostAndField()
{
    QFETCH(QJsonObject, host);
    QFETCH(QString, expected);
    QString error;
    QVERIFY(!ClusterSpec::fromJson(QJsonObject{{"hosts", QJsonArray{host}}}, &error));
    QVERIFY2(error.startsWith(expected), qPrintable(error));

    const QJsonObject twin{{"name", "a"}, {"address", "h"}, {"user", "u"}, {"work_dir", "/w"}};
    QVERIFY(!ClusterSpec::fromJson(QJsonObject{{"hosts", QJsonArray{twin, twin}}}, &error));
    QVERIFY2(error.contains("host \"a\": field \"name\" is used by two hosts"), qPrintable(error));
    QVERIFY(!ClusterSpec::fromJson(QJsonObject{{"hosts", QJsonArray{}}}, &error));
    QVERIFY2(error.contains("field \"hosts\" must be a non-empty list"), qPrintable(error));
}

void TestClusterSpec::rendezvousPortRule()
{
    QCOMPARE(RunLauncher::rendezvousPort(29600, QStringLiteral("10.0.0.5")), quint16(29600));  // the cluster file's
    QCOMPARE(RunLauncher::rendezvousPort(0, QStringLiteral("10.0.0.5")), quint16(29500));  // c10d's customary one
    // Rank 0 on this machine: a port free at the time, on that address.
    const quint16 local = RunLauncher::rendezvousPort(0, QStringLiteral("127.0.0.1"));
    QVERIFY(local != 0);
    QTcpServer server;
    QVERIFY2(server.listen(QHostAddress::LocalHost, local), qPrintable(server.errorString()));
}

void TestClusterSpec::runFolderIsCreatedOrRefused()
{
    QTemporaryDir dir;
    const QString wanted = dir.filePath(QStringLiteral("runs/first"));
    QString error;
    QCOMPARE(RunLauncher::createRunDir(wanted, QStringLiteral("gaia"), &error), std::optional<QString>(wanted));
    QVERIFY(QFileInfo(wanted).isDir());

    QFile file(dir.filePath(QStringLiteral("a-file")));
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.close();
    const QString blocked = dir.filePath(QStringLiteral("a-file/run"));
    QVERIFY(!RunLauncher::createRunDir(blocked, QStringLiteral("gaia"), &error));
    QVERIFY2(error.contains(blocked) && error.contains("choose a writable one"), qPrintable(error));
}

QTEST_GUILESS_MAIN(TestClusterSpec)
#include "tst_cluster_spec.moc"
