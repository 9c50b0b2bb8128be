#pragma once

// dlion-agent processes in the node namespaces of a NetnsTestbed, and a run
// over them driven from the controller namespace. Shared by the netns tests
// and the emulator calibration benchmark.
#include "netns_testbed.h"

#include <handshake.h>
#include <run_session.h>

#include <QSignalSpy>

#include <functional>

namespace dlion::test {

// The testbed's micro-cloud: 3 nodes whose links carry the heterogeneous-WAN
// preset's rates, 40/20/10 Mbit/s.
inline constexpr int kWanNodes = 3;
inline double wanHeteroMbps(int i, int j)
{
    static const double kRates[kWanNodes][kWanNodes] = {{0, 40, 20}, {40, 0, 10}, {20, 10, 0}};
    return kRates[i][j];
}

class NetnsAgents {
public:
    explicit NetnsAgents(NetnsTestbed &bed, int nodes) : m_bed(bed), m_nodes(nodes) {}
    ~NetnsAgents() { stop(); }

    // Runs `job` over fresh agents, one per node; `during` acts on the
    // running session. False with a message when the run failed or did not
    // end within `timeoutMs`.
    bool run(const protocol::JobSpec &job, core::RunSession &session, QString *message,
             const std::function<void()> &during = {}, int timeoutMs = 60000)
    {
        QList<core::AgentEndpoint> endpoints;
        if (!start(&endpoints)) {
            *message = QStringLiteral("agents did not start in their namespaces");
            return false;
        }
        // The control connections leave from the controller namespace.
        if (!m_bed.enterController()) {
            *message = QStringLiteral("cannot enter the controller namespace");
            return false;
        }
        QSignalSpy finished(&session, &core::RunSession::finished);
        session.start(job, endpoints, m_secret, endpoints[0].host, 29400);
        if (during)
            during();
        const bool ended = finished.wait(timeoutMs);
        session.shutdownAgents();
        m_bed.leaveController();
        if (!ended) {
            *message = QStringLiteral("the run did not end in time");
            return false;
        }
        *message = finished.at(0).at(1).toString();
        return finished.at(0).at(0).toBool();
    }

    void stop()
    {
        for (QProcess *p : std::as_const(m_agents)) {
            p->terminate();
            if (!p->waitForFinished(5000))
                p->kill();
            p->waitForFinished(2000);
        }
        qDeleteAll(m_agents);
        m_agents.clear();
    }

private:
    // One agent per node namespace; false if any does not report ready.
    bool start(QList<core::AgentEndpoint> *endpoints)
    {
        stop();
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert("DLION_SECRET", QString::fromLatin1(m_secret));
        for (int i = 0; i < m_nodes; ++i) {
            auto *p = new QProcess;
            p->setProcessEnvironment(env);
            p->setProcessChannelMode(QProcess::ForwardedErrorChannel);
            p->start("ip", m_bed.inNode(i, qEnvironmentVariable("DLION_AGENT"),
                                        {"--listen", NetnsTestbed::address(i) + ":0", "--grace", "0", "--exit-with-parent"}));
            m_agents.append(p);
        }
        for (int i = 0; i < m_nodes; ++i) {
            QProcess *p = m_agents[i];
            if (!p->waitForReadyRead(30000))
                return false;
            const QByteArray line = p->readLine().trimmed();
            endpoints->append({NetnsTestbed::address(i), quint16(line.mid(line.lastIndexOf(':') + 1).toUInt())});
        }
        return true;
    }

    NetnsTestbed &m_bed;
    int m_nodes;
    QByteArray m_secret = protocol::handshake::makeSecret();
    QList<QProcess *> m_agents;
};

} // namespace dlion::test
