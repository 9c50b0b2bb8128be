#include "job_runner.h"

#include "agent_log.h"

#include <engine_error.h>

#include <QMetaObject>

namespace dlion::agent {

JobRunner::JobRunner(protocol::JobSpec spec, std::string localHost, QByteArray secret, QObject *parent)
    : QObject(parent), m_spec(std::move(spec))
{
    engine::WorkerHooks hooks;
    hooks.round = [this](const protocol::RoundRecord &r) {
        std::lock_guard lock(m_mutex);
        m_pending.rounds.append(r);
    };
    hooks.eval = [this](const protocol::EvalRecord &e) {
        std::lock_guard lock(m_mutex);
        m_pending.evals.append(e);
    };
    hooks.merge = [this](const protocol::MergeEvent &m) {
        std::lock_guard lock(m_mutex);
        m_pending.merges.append(m);
    };
    hooks.data = [this](const protocol::DataSummary &d) {
        std::lock_guard lock(m_mutex);
        m_pending.data.append(d);
    };
    hooks.state = [this](protocol::WorkerState s) {
        {
            std::lock_guard lock(m_mutex);
            m_state = s;
        }
        QMetaObject::invokeMethod(this, [this, s] { Q_EMIT stateChanged(s); }, Qt::QueuedConnection);
    };
    hooks.warning = [this](const QString &message) {
        QMetaObject::invokeMethod(this, [this, message] { Q_EMIT warning(message); }, Qt::QueuedConnection);
    };
    hooks.groupFailed = [this](int generation, const QString &why) {
        QMetaObject::invokeMethod(this, [this, generation, why] { Q_EMIT groupFailed(generation, why); }, Qt::QueuedConnection);
    };
    m_worker = std::make_unique<engine::Worker>(m_spec, std::move(localHost), std::move(secret), std::move(hooks));
}

JobRunner::~JobRunner()
{
    if (m_thread.joinable()) {
        // A worker blocked in a collective returns within the group timeout.
        m_worker->requestStop();
        m_thread.join();
    }
}

void JobRunner::start()
{
    m_running = true;
    m_thread = std::thread([this] {
        bool ok = true;
        QString message;
        engine::WorkerResult result;
        try {
            result = m_worker->run();
        } catch (const engine::EngineError &e) {
            ok = false;
            message = QString::fromStdString(e.what());
        } catch (const std::exception &e) {
            ok = false;
            message = QStringLiteral("internal engine error: %1").arg(QString::fromStdString(e.what()));
        }
        if (!ok)
            qCWarning(lcAgent).noquote() << "worker" << m_spec.rank << "failed:" << message;
        QMetaObject::invokeMethod(
            this,
            [this, ok, message, result] {
                if (m_thread.joinable())
                    m_thread.join();
                m_running = false;
                Q_EMIT finished(ok, message, result);
            },
            Qt::QueuedConnection);
    });
}

protocol::TelemetryBatch JobRunner::takeTelemetry()
{
    std::lock_guard lock(m_mutex);
    protocol::TelemetryBatch out = std::move(m_pending);
    m_pending.clear();
    return out;
}

protocol::WorkerState JobRunner::state() const
{
    std::lock_guard lock(m_mutex);
    return m_state;
}

} // namespace dlion::agent
