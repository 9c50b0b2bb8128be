#pragma once

// A micro-cloud made of Linux network namespaces: N node namespaces joined
// pairwise by veth pairs, each pair shaped with `tc tbf` to its own rate,
// and one controller namespace reaching every node over an unshaped veth.
// Every address lives on interfaces inside these namespaces:
//   node i:      10.231.0.(i+1)/32 on lo, a host route per peer via its link
//   controller:  10.232.0.1/32 on lo, a host route per node
// The test process enters the controller namespace (only its own thread's
// sockets are affected) while it drives a run. Everything is deleted by
// `down()` and by the destructor, also after a failure. Needs root and
// iproute2; `skipReason()` says why it cannot run otherwise.
#include <QFile>
#include <QProcess>
#include <QStringList>
#include <QtTest>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace dlion::test {

class NetnsTestbed {
public:
    ~NetnsTestbed() { down(); }

    static QString skipReason()
    {
        if (geteuid() != 0)
            return QStringLiteral("needs root to create network namespaces");
        QProcess p;
        p.start("ip", {"netns", "list"});
        if (!p.waitForFinished(5000) || p.exitCode() != 0)
            return QStringLiteral("`ip netns` is unavailable (install iproute2)");
        // Root inside an unprivileged container may still not create one.
        const QString probe = QStringLiteral("dlt%1probe").arg(getpid());
        p.start("ip", {"netns", "add", probe});
        if (!p.waitForFinished(5000) || p.exitCode() != 0)
            return QStringLiteral("cannot create network namespaces here: ") + QString::fromLocal8Bit(p.readAllStandardError()).trimmed();
        p.start("ip", {"netns", "delete", probe});
        p.waitForFinished(5000);
        return {};
    }

    // rateMbps(i, j) gives the rate of the link between nodes i and j.
    bool up(int nodes, const std::function<double(int, int)> &rateMbps, QString *why)
    {
        m_prefix = QStringLiteral("dlt%1").arg(getpid());
        m_nodes = nodes;
        m_error.clear();
        const QString ctl = controllerNs();
        cmd({"netns", "add", ctl});
        m_namespaces << ctl;
        ns(ctl, {"link", "set", "lo", "up"});
        ns(ctl, {"addr", "add", "10.232.0.1/32", "dev", "lo"});
        for (int i = 0; i < nodes; ++i) {
            const QString n = nodeNs(i);
            cmd({"netns", "add", n});
            m_namespaces << n;
            ns(n, {"link", "set", "lo", "up"});
            ns(n, {"addr", "add", address(i) + "/32", "dev", "lo"});
            link(ctl, QStringLiteral("c%1").arg(i), "10.232.0.1", n, "c", address(i));
        }
        for (int i = 0; i < nodes; ++i) {
            for (int j = i + 1; j < nodes; ++j) {
                const QString a = QStringLiteral("l%1%2").arg(i).arg(j), b = QStringLiteral("l%1%2").arg(j).arg(i);
                link(nodeNs(i), a, address(i), nodeNs(j), b, address(j));
                shape(nodeNs(i), a, rateMbps(i, j));
                shape(nodeNs(j), b, rateMbps(i, j));
            }
        }
        *why = m_error;
        return m_error.isEmpty();
    }

    void down()
    {
        leaveController();
        for (const QString &n : std::as_const(m_namespaces))
            cmd({"netns", "delete", n});
        m_namespaces.clear();
    }

    // Moves the calling thread's new sockets into the controller namespace.
    bool enterController()
    {
        m_rootNs = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        const int ctl = ::open(QStringLiteral("/run/netns/%1").arg(controllerNs()).toLocal8Bit().constData(), O_RDONLY | O_CLOEXEC);
        const bool ok = m_rootNs >= 0 && ctl >= 0 && ::setns(ctl, CLONE_NEWNET) == 0;
        if (ctl >= 0)
            ::close(ctl);
        return ok;
    }

    void leaveController()
    {
        if (m_rootNs < 0)
            return;
        ::setns(m_rootNs, CLONE_NEWNET);
        ::close(m_rootNs);
        m_rootNs = -1;
    }

    // Re-shapes the link between nodes i and j (both directions), live.
    bool setRate(int i, int j, double mbps, QString *why)
    {
        m_error.clear();
        shape(nodeNs(i), QStringLiteral("l%1%2").arg(i).arg(j), mbps, "change");
        shape(nodeNs(j), QStringLiteral("l%1%2").arg(j).arg(i), mbps, "change");
        *why = m_error;
        return m_error.isEmpty();
    }

    static QString address(int node) { return QStringLiteral("10.231.0.%1").arg(node + 1); }
    QString nodeNs(int node) const { return QStringLiteral("%1n%2").arg(m_prefix).arg(node); }
    QString controllerNs() const { return m_prefix + "c"; }
    // `program args` inside node i's namespace.
    QStringList inNode(int node, const QString &program, const QStringList &args) const
    {
        return QStringList{"netns", "exec", nodeNs(node), program} + args;
    }

private:
    // A veth pair from namespace a (device da, address aAddr) to b, with a
    // host route each way; device names are unique while in the root namespace.
    void link(const QString &a, const QString &da, const QString &aAddr, const QString &b, const QString &db, const QString &bAddr)
    {
        const QString tmpA = QStringLiteral("d%1a%2").arg(getpid()).arg(da), tmpB = QStringLiteral("d%1b%2").arg(getpid()).arg(da);
        cmd({"link", "add", tmpA, "type", "veth", "peer", "name", tmpB});
        cmd({"link", "set", tmpA, "netns", a});
        cmd({"link", "set", tmpB, "netns", b});
        ns(a, {"link", "set", tmpA, "name", da});
        ns(b, {"link", "set", tmpB, "name", db});
        ns(a, {"link", "set", da, "up"});
        ns(b, {"link", "set", db, "up"});
        ns(a, {"route", "add", bAddr + "/32", "dev", da, "src", aAddr});
        ns(b, {"route", "add", aAddr + "/32", "dev", db, "src", bAddr});
    }

    // A 4 KB bucket: enough to hold the rate between timer ticks, small
    // enough that an idle link's full bucket barely speeds a short transfer.
    // The queue holds 50 ms at the rate, and at least 32 full frames as a
    // router's does: 50 ms of a link cut to a trickle is under one frame,
    // and a queue that drops nearly every packet of a window measures TCP's
    // retransmission backoff (seconds per lost window), not the link.
    void shape(const QString &n, const QString &dev, double mbps, const QString &verb = QStringLiteral("add"))
    {
        const auto limit = std::max<qint64>(qint64(mbps * 1e6 / 8 * 0.050), 32 * 1514);
        run("ip", {"netns", "exec", n, "tc", "qdisc", verb, "dev", dev, "root", "tbf", "rate",
                   QStringLiteral("%1mbit").arg(mbps), "burst", "32kbit", "limit", QString::number(limit)});
    }

    void ns(const QString &n, const QStringList &args) { cmd(QStringList{"-n", n} + args); }
    void cmd(const QStringList &args) { run("ip", args); }

    void run(const QString &program, const QStringList &args)
    {
        QProcess p;
        p.start(program, args);
        const bool ok = p.waitForFinished(10000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
        if (!ok && m_error.isEmpty())
            m_error = QStringLiteral("`%1 %2` failed: %3").arg(program, args.join(' '), QString::fromLocal8Bit(p.readAllStandardError()).trimmed());
    }

    QString m_prefix;
    int m_nodes = 0;
    QStringList m_namespaces;
    QString m_error;
    int m_rootNs = -1;
};

} // namespace dlion::test
