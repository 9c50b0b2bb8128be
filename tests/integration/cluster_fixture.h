#pragma once

// Runs a job on real local dlion-agent processes for integration tests.
#include <handshake.h>
#include <job_builder.h>
#include <local_cluster.h>
#include <run_session.h>

#include <QSignalSpy>
#include <QtTest>

#include <memory>

namespace dlion::test {

struct LocalRun {
    std::unique_ptr<core::LocalCluster> cluster = std::make_unique<core::LocalCluster>();
    std::unique_ptr<core::RunSession> session = std::make_unique<core::RunSession>();
    bool ok = false;
    QString message;

    // Starts `workers` agents and the job; returns false if the agents could
    // not start within the timeout. Generation g meets at rendezvousPort + g
    // (0: a free port).
    bool start(const protocol::JobSpec &job, int workers, int timeoutMs = 60000, quint16 rendezvousPort = 0)
    {
        const QByteArray secret = protocol::handshake::makeSecret();
        QSignalSpy ready(cluster.get(), &core::LocalCluster::ready);
        cluster->start(workers, secret);
        if (!ready.wait(timeoutMs))
            return false;
        QObject::connect(session.get(), &core::RunSession::finished, session.get(), [this](bool o, const QString &m) {
            ok = o;
            message = m;
        });
        session->start(job, cluster->endpoints(), secret, core::LocalCluster::kHost,
                       rendezvousPort ? rendezvousPort : core::pickFreePort());
        return true;
    }

    bool waitFinished(int timeoutMs)
    {
        const auto s = session->state();
        if (s == core::RunSession::State::Finished || s == core::RunSession::State::Failed)
            return true;
        QSignalSpy done(session.get(), &core::RunSession::finished);
        return done.wait(timeoutMs);
    }
};

} // namespace dlion::test
