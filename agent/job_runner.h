#pragma once

#include <control_names.h>
#include <job_spec.h>
#include <telemetry.h>
#include <worker.h>

#include <QObject>

#include <memory>
#include <mutex>
#include <thread>

namespace dlion::agent {

// Runs one engine::Worker on its own thread and collects its telemetry for
// the agent's event loop. `takeTelemetry()` hands over what accumulated;
// `finished()` is emitted on the object's thread when training ends.
class JobRunner : public QObject {
    Q_OBJECT
public:
    JobRunner(protocol::JobSpec spec, std::string localHost, QByteArray secret, QObject *parent = nullptr);
    ~JobRunner() override;  // stops and joins the training thread

    void start();
    bool isRunning() const { return m_running; }
    engine::Worker &worker() { return *m_worker; }
    const protocol::JobSpec &spec() const { return m_spec; }
    protocol::TelemetryBatch takeTelemetry();
    protocol::WorkerState state() const;

Q_SIGNALS:
    void stateChanged(dlion::protocol::WorkerState state);
    void warning(const QString &message);
    void groupFailed(int generation, const QString &why);
    void finished(bool ok, const QString &message, const dlion::engine::WorkerResult &result);

private:
    protocol::JobSpec m_spec;
    std::unique_ptr<engine::Worker> m_worker;
    std::thread m_thread;
    bool m_running = false;
    mutable std::mutex m_mutex;
    protocol::TelemetryBatch m_pending;
    protocol::WorkerState m_state = protocol::WorkerState::Idle;
};

} // namespace dlion::agent

Q_DECLARE_METATYPE(dlion::engine::WorkerResult)
