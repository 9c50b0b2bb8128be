#include "agent_server.h"

#include "agent_log.h"

#include <safe_file.h>

#include <QCborArray>
#include <QCoreApplication>
#include <QJsonObject>
#include <QTcpSocket>

#include <sys/resource.h>

#include <algorithm>
#include <utility>

Q_LOGGING_CATEGORY(lcAgent, "dlion.agent")

namespace dlion::agent {

using protocol::Command;
using protocol::FramedConnection;
using protocol::MessageType;

namespace {
constexpr int kFlushIntervalMs = 100;
constexpr int kHeartbeatIntervalMs = 1000;
// A controller that never acknowledges (an older one, or one whose store
// keeps failing) must not grow the agent without bound; this is minutes of
// telemetry, far more than one store commit interval.
constexpr qsizetype kMaxUnackedRecords = 100000;
// Telemetry no controller has taken yet (a long detach), bounded alike.
constexpr qsizetype kMaxBacklogRecords = kMaxUnackedRecords;
// One Telemetry frame's body: well under the controller's limit
// (FrameCodec::kDefaultMaxBody), so a long backlog crosses as several frames.
constexpr qsizetype kMaxTelemetryFrameBytes = 1 << 20;
// Unauthenticated connections: handshake frames are small and a controller
// answers at once, so few and short waits serve every real one.
constexpr int kMaxHandshaking = 16;
constexpr int kHandshakeTimeoutMs = 5000;
// After an accept error (e.g. out of descriptors) the agent stops accepting
// and tries again after this pause.
constexpr int kAcceptRetryMs = 500;
constexpr qint64 kLogIntervalMs = 10000;

// A user's model must be the file the controller hashed when the run
// started: a copy corrupted on its way to this host, or a file changed
// since, is refused before torch loads it.
QString checkModel(const protocol::JobSpec &spec)
{
    if (spec.modelSha256.isEmpty())
        return {};
    QString error;
    const std::optional<QString> sha = files::sha256Hex(spec.model, &error);
    if (!sha)
        return QStringLiteral("model: %1").arg(error);
    if (*sha != spec.modelSha256)
        return QStringLiteral("model %1 has SHA-256 %2, but the job expects %3: the file changed or was corrupted "
                              "after the run started; start the run again").arg(spec.model, *sha, spec.modelSha256);
    return {};
}

qint64 peakRssKb()
{
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss;  // kilobytes on Linux
}

void append(protocol::TelemetryBatch &to, protocol::TelemetryBatch &&from)
{
    to.rounds += std::move(from.rounds);
    to.evals += std::move(from.evals);
    to.merges += std::move(from.merges);
    to.data += std::move(from.data);
}
} // namespace

AgentServer::AgentServer(Options options, QObject *parent) : QObject(parent), m_options(std::move(options))
{
    connect(&m_server, &QTcpServer::newConnection, this, &AgentServer::onNewConnection);
    connect(&m_server, &QTcpServer::acceptError, this, &AgentServer::onAcceptError);
    m_resumeAcceptTimer.setSingleShot(true);
    m_resumeAcceptTimer.setInterval(kAcceptRetryMs);
    connect(&m_resumeAcceptTimer, &QTimer::timeout, &m_server, &QTcpServer::resumeAccepting);
    m_flushTimer.setInterval(kFlushIntervalMs);
    connect(&m_flushTimer, &QTimer::timeout, this, &AgentServer::flushTelemetry);
    m_flushTimer.start();
    m_heartbeatTimer.setInterval(kHeartbeatIntervalMs);
    connect(&m_heartbeatTimer, &QTimer::timeout, this, [this] {
        if (m_controller && m_controller->state() == FramedConnection::State::Ready)
            m_controller->send(MessageType::Heartbeat, QCborMap{{"state", stateName()}});
    });
    m_heartbeatTimer.start();
    m_idleTimer.setSingleShot(true);
    connect(&m_idleTimer, &QTimer::timeout, this, [this] {
        qCWarning(lcAgent) << "no job and no controller for" << m_options.idleExitS << "s; exiting";
        Q_EMIT shutdownRequested();
    });
    m_graceTimer.setSingleShot(true);
    connect(&m_graceTimer, &QTimer::timeout, this, [this] {
        if (m_runner && m_runner->isRunning()) {
            qCWarning(lcAgent) << "no controller reattached within" << m_options.graceS << "s; stopping the job";
            m_runner->worker().requestStop();
        }
    });
}

AgentServer::~AgentServer() = default;

qint64 AgentServer::LogThrottle::count()
{
    ++m_unreported;
    if (m_lastLine.isValid() && m_lastLine.elapsed() < kLogIntervalMs)
        return 0;
    m_lastLine.start();
    return std::exchange(m_unreported, 0);
}

void AgentServer::updateIdleTimer()
{
    const bool idle = !m_controller && !(m_runner && m_runner->isRunning());
    if (m_options.idleExitS > 0 && idle && !m_idleTimer.isActive())
        m_idleTimer.start(m_options.idleExitS * 1000);
    else if (!idle)
        m_idleTimer.stop();
}

bool AgentServer::listen(QString *error)
{
    if (m_server.listen(m_options.address, m_options.port)) {
        updateIdleTimer();
        return true;
    }
    *error = QStringLiteral("cannot listen on %1:%2: %3")
                 .arg(m_options.address.toString())
                 .arg(m_options.port)
                 .arg(m_server.errorString());
    return false;
}

void AgentServer::onNewConnection()
{
    while (QTcpSocket *socket = m_server.nextPendingConnection())
        accept(socket);
}

QList<FramedConnection *> AgentServer::handshaking() const
{
    QList<FramedConnection *> out;  // children keep their creation order
    for (FramedConnection *c : findChildren<FramedConnection *>(Qt::FindDirectChildrenOnly)) {
        if (c->state() == FramedConnection::State::Handshaking)
            out.append(c);
    }
    return out;
}

void AgentServer::accept(QTcpSocket *socket)
{
    // The oldest makes room, not the newest: silent connections then cannot
    // lock a controller out for as long as they are held open.
    if (const QList<FramedConnection *> waiting = handshaking(); waiting.size() >= kMaxHandshaking) {
        waiting.first()->close();
        if (const qint64 n = m_evictedLog.count())
            qCWarning(lcAgent) << "closed" << n << "unauthenticated connection(s): more than" << kMaxHandshaking
                               << "at once";
    }
    auto *conn = new FramedConnection(socket, FramedConnection::Role::Agent, m_options.secret, this);
    connect(conn, &FramedConnection::closed, conn, &QObject::deleteLater);
    connect(conn, &FramedConnection::ready, this, [this, conn] {
        if (m_controller && m_controller != conn) {
            qCInfo(lcAgent) << "a new controller replaces the previous one";
            m_controller->close();
        }
        m_controller = conn;
        m_graceTimer.stop();
        updateIdleTimer();
        connect(conn, &FramedConnection::frameReceived, this, &AgentServer::onFrame);
        connect(conn, &FramedConnection::closed, this, &AgentServer::onControllerClosed);
        qCInfo(lcAgent).noquote() << "controller attached from" << conn->peerName();
        sendStatus();
        // First what the previous controller got but may not have stored.
        for (const auto &batch : m_unacked)
            sendTelemetry(batch);
        flushTelemetry();
        if (!m_finished.isEmpty() && !(m_runner && m_runner->isRunning()))
            conn->send(MessageType::Finished, m_finished);
    });
    conn->start(kHandshakeTimeoutMs);
}

void AgentServer::onAcceptError(QAbstractSocket::SocketError error)
{
    // QTcpServer has paused itself and would never resume.
    if (const qint64 n = m_acceptErrorLog.count())
        qCWarning(lcAgent) << "cannot accept connections:" << error << "(out of file descriptors?)," << n
                           << "time(s); trying again every" << kAcceptRetryMs << "ms";
    m_resumeAcceptTimer.start();
}

void AgentServer::onControllerClosed()
{
    if (sender() != m_controller.data())
        return;
    m_controller.clear();
    updateIdleTimer();
    if (m_runner && m_runner->isRunning()) {
        qCWarning(lcAgent) << "controller detached; waiting" << m_options.graceS << "s for it to reattach";
        m_graceTimer.start(m_options.graceS * 1000);
    }
}

void AgentServer::onFrame(const protocol::Frame &frame)
{
    switch (frame.type) {
    case MessageType::Job:
        return startJob(frame.body);
    case MessageType::Command:
        return handleCommand(frame.body);
    case MessageType::Heartbeat:
        return;
    default:
        return sendError(QStringLiteral("unexpected %1 message").arg(QLatin1String(messageTypeName(frame.type))));
    }
}

void AgentServer::startJob(const QCborMap &body)
{
    if (m_runner && m_runner->isRunning())
        return sendError(QStringLiteral("a job is already running on this agent; stop it first"));
    QString error;
    const auto spec = protocol::JobSpec::fromJson(body.toJsonObject(), &error);
    if (!spec)
        return refuseJob(QStringLiteral("invalid job: %1").arg(error));
    if (const QString why = checkModel(*spec); !why.isEmpty())
        return refuseJob(why);
    m_runner.reset();
    m_finished.clear();
    m_backlog.clear();
    m_unacked.clear();  // the previous job's controller has moved on
    m_unackedRecords = 0;
    m_warnedUnackedFull = false;
    const QString host = m_options.address == QHostAddress::Any || m_options.address == QHostAddress::AnyIPv6
        ? QString()
        : m_options.address.toString();
    m_runner = std::make_unique<JobRunner>(*spec, host.toStdString(), m_options.secret);
    connect(m_runner.get(), &JobRunner::stateChanged, this, [this] { sendStatus(); });
    // Warnings travel as Error frames: the controller logs them and the run goes on.
    connect(m_runner.get(), &JobRunner::warning, this, [this](const QString &m) { sendError(QStringLiteral("warning: %1").arg(m)); });
    // The controller answers with a fresh plan for the same members.
    connect(m_runner.get(), &JobRunner::groupFailed, this, [this](int generation, const QString &why) {
        if (m_controller)
            m_controller->send(MessageType::Status, QCborMap{{"state", stateName()},
                                                             {"message", why},
                                                             {"failed_generation", generation}});
    });
    connect(m_runner.get(), &JobRunner::finished, this, &AgentServer::onJobFinished);
    qCInfo(lcAgent).noquote() << "starting job: strategy" << spec->strategy << "rank" << spec->rank << "of" << spec->world;
    m_runner->start();
}

void AgentServer::refuseJob(const QString &message)
{
    // The job ends before it starts: Finished, so the controller fails the
    // run with this message instead of waiting for it.
    qCWarning(lcAgent).noquote() << message;
    if (m_controller)
        m_controller->send(MessageType::Finished, QCborMap{{"ok", false}, {"message", message}});
}

void AgentServer::handleCommand(const QCborMap &body)
{
    const QString name = body.value("cmd").toString();
    const std::optional<Command> cmd = protocol::commandFromName(name);
    if (!cmd)
        return sendError(QStringLiteral("unknown command \"%1\" (a controller newer than this agent? deploy the same version)").arg(name));
    if (*cmd == Command::Shutdown) {
        if (m_runner && m_runner->isRunning()) {
            m_shutdownAfterJob = true;
            m_runner->worker().requestStop();
        } else {
            Q_EMIT shutdownRequested();
        }
        return;
    }
    if (*cmd == Command::Ack)  // valid after the job too: the last records are acked then
        return acknowledge(body.value("seq"));
    if (!m_runner || !m_runner->isRunning())
        return sendError(QStringLiteral("command \"%1\" needs a running job").arg(name));
    if (!runCommand(*cmd, body))
        sendError(QStringLiteral("malformed command \"%1\"").arg(name));
}

// A command for the running job; false when its arguments are malformed.
bool AgentServer::runCommand(Command cmd, const QCborMap &body)
{
    engine::Worker &w = m_runner->worker();
    switch (cmd) {
    case Command::Stop:
        w.requestStop();
        return true;
    case Command::Pause:
    case Command::Resume:
        w.setPaused(cmd == Command::Pause);
        return true;
    case Command::MergeNow:
        w.requestMerge();
        return true;
    case Command::SetSlowdown:
        if (!(body.value("value").toDouble() >= 1))
            return false;
        w.setSlowdown(body.value("value").toDouble());
        return true;
    case Command::SetLinkCap:
        if (!body.value("peer").isInteger() || !(body.value("mbps").toDouble(-1) >= 0))
            return false;
        w.setLinkCap(int(body.value("peer").toInteger()), body.value("mbps").toDouble());
        return true;
    case Command::Regroup:
        regroup(body.value("plan").toMap());
        return true;
    case Command::Shutdown:
    case Command::Ack:
        break;
    }
    return false;
}

void AgentServer::regroup(const QCborMap &planBody)
{
    QString why;
    const auto plan = protocol::GroupPlan::fromJson(planBody.toJsonObject(), m_runner->spec().world, &why);
    if (!plan)
        return sendError(QStringLiteral("malformed regroup plan: %1").arg(why));
    if (!plan->members.contains(m_runner->spec().rank))
        return sendError(QStringLiteral("regroup plan for generation %1 does not include this worker").arg(plan->generation));
    qCInfo(lcAgent) << "regrouping: generation" << plan->generation << "with workers" << plan->members;
    m_runner->worker().requestRegroup(*plan);
}

void AgentServer::capBacklog()
{
    const qsizetype excess = m_backlog.records() - kMaxBacklogRecords;
    if (excess <= 0)
        return;
    if (!m_warnedBacklogFull)
        qCWarning(lcAgent) << "no controller has taken telemetry for long; keeping only the last"
                           << kMaxBacklogRecords << "records for it";
    m_warnedBacklogFull = true;
    protocol::dropOldest(m_backlog, excess);
}

void AgentServer::flushTelemetry()
{
    if (m_runner)
        append(m_backlog, m_runner->takeTelemetry());
    capBacklog();
    if (m_backlog.isEmpty() || !m_controller || m_controller->state() != FramedConnection::State::Ready)
        return;
    for (protocol::TelemetryBatch &batch : protocol::split(m_backlog, kMaxTelemetryFrameBytes)) {
        batch.seq = ++m_lastSeq;
        sendTelemetry(batch);
        m_unackedRecords += batch.records();
        m_unacked.push_back(std::move(batch));
    }
    m_backlog = {};
    m_warnedBacklogFull = false;
    while (m_unackedRecords > kMaxUnackedRecords && m_unacked.size() > 1) {
        if (!m_warnedUnackedFull)
            qCWarning(lcAgent) << "the controller does not acknowledge telemetry; keeping only the last"
                               << kMaxUnackedRecords << "records for a reattaching controller";
        m_warnedUnackedFull = true;
        m_unackedRecords -= m_unacked.front().records();
        m_unacked.pop_front();
    }
}

void AgentServer::sendTelemetry(const protocol::TelemetryBatch &batch)
{
    m_controller->send(MessageType::Telemetry, protocol::toCbor(batch));
}

void AgentServer::acknowledge(const QCborValue &seq)
{
    if (!seq.isInteger())  // malformed: keep everything, a later ack frees it
        return;
    m_warnedUnackedFull = false;
    while (!m_unacked.empty() && m_unacked.front().seq <= seq.toInteger()) {
        m_unackedRecords -= m_unacked.front().records();
        m_unacked.pop_front();
    }
}

QString AgentServer::stateName() const
{
    return protocol::workerStateName(m_runner ? m_runner->state() : protocol::WorkerState::Idle);
}

void AgentServer::sendStatus(const QString &message)
{
    if (m_controller)
        m_controller->send(MessageType::Status,
                           QCborMap{{"state", stateName()}, {"message", message}});
}

void AgentServer::sendError(const QString &message)
{
    qCWarning(lcAgent).noquote() << message;
    if (m_controller)
        m_controller->send(MessageType::Error, QCborMap{{"message", message}});
}

void AgentServer::addFinalModel(const engine::FinalModel &model)
{
    if (model.bytes.isEmpty())
        return;
    QCborArray shape;
    for (std::int64_t d : model.inputShape)
        shape.append(qint64(d));
    QCborMap info{{"format", "torchscript"},
                  {"sha256", QString::fromLatin1(model.sha256)},
                  {"parameters", model.parameters},
                  {"input_shape", shape},
                  {"accuracy", model.accuracy}};
    if (!model.stateDict.isEmpty())
        info.insert(QStringLiteral("state_dict_sha256"), QString::fromLatin1(model.stateDictSha256));
    m_finished.insert(QStringLiteral("model_info"), info);
    // A model over FrameCodec::kFragmentBody crosses as several frames.
    m_finished.insert(QStringLiteral("model"), model.bytes);
    if (!model.stateDict.isEmpty())
        m_finished.insert(QStringLiteral("model_state_dict"), model.stateDict);
}

void AgentServer::onJobFinished(bool ok, const QString &message, const engine::WorkerResult &result)
{
    flushTelemetry();
    updateIdleTimer();
    m_finished = QCborMap{{"ok", ok},
                          {"message", message},
                          {"rounds", result.rounds},
                          {"seconds", result.seconds},
                          {"samples", result.samples},
                          {"stopped_by_request", result.stoppedByRequest},
                          {"final_accuracy", result.finalEval.globalAccuracy},
                          {"final_local_accuracy", result.finalEval.accuracy},
                          {"peak_rss_kb", peakRssKb()}};
    addFinalModel(result.model);
    if (m_controller)
        m_controller->send(MessageType::Finished, m_finished);
    if (m_shutdownAfterJob)
        Q_EMIT shutdownRequested();
}

} // namespace dlion::agent
