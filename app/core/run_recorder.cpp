#include "run_recorder.h"

#include "cluster_spec.h"
#include "core_log.h"
#include "run_session.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QSysInfo>

namespace dlion::core {

QJsonObject localClusterInfo(int workers)
{
    return QJsonObject{{"kind", "local"}, {"workers", workers}, {"host", QSysInfo::machineHostName()}};
}

QJsonObject sshClusterInfo(const ClusterSpec &spec, const QString &file)
{
    QJsonArray hosts;
    for (const ClusterHost &h : spec.hosts) {
        QJsonObject o{{"name", h.name}, {"address", h.address}, {"port", h.port}, {"user", h.user}};
        if (h.slowdown > 0)
            o.insert("slowdown", h.slowdown);
        hosts.append(o);
    }
    QJsonObject info{{"kind", "ssh"}, {"name", spec.name}, {"workers", int(spec.hosts.size())}, {"hosts", hosts}};
    if (!file.isEmpty())  // hosts typed into the GUI come from no file
        info.insert("file", QFileInfo(file).absoluteFilePath());
    return info;
}

QJsonObject agentsClusterInfo(const QList<AgentEndpoint> &agents)
{
    QJsonArray endpoints;
    for (const AgentEndpoint &a : agents)
        endpoints.append(QStringLiteral("%1:%2").arg(a.host).arg(a.port));
    return QJsonObject{{"kind", "agents"}, {"workers", int(agents.size())}, {"agents", endpoints}};
}

RunRecorder::RunRecorder(RunStore *store, QObject *parent) : QObject(parent), m_store(store)
{
    m_timer.setInterval(1000);
    connect(&m_timer, &QTimer::timeout, this, [this] { flush(); });
}

void RunRecorder::attach(RunSession *session)
{
    // Agents keep what they sent until it is committed here: a controller
    // killed before its next commit loses nothing.
    session->setAckAfterCommit(true);
    connect(this, &RunRecorder::committed, session, &RunSession::acknowledgeTelemetry);
    connect(session, &RunSession::stateChanged, this, [this, session](RunSession::State s) {
        if (s == RunSession::State::Connecting && !isRecording() && !session->isTakeover())
            session->setAckAfterCommit(begin(&session->data()));  // no stored run: no commit to wait for
        else if (s == RunSession::State::Running)
            flush();
    });
    connect(session, &RunSession::finished, this, [this](bool ok, const QString &message) { finish(ok, message); });
}

bool RunRecorder::begin(const RunData *data)
{
    m_data = data;
    m_runId = 0;
    m_finished = false;
    m_reported = false;
    m_written = QList<qsizetype>(data->workers(), 0);
    m_segmentStart = m_written;
    m_evalsWritten = m_mergesWritten = 0;
    m_dataReportsWritten = 0;
    m_samples = m_bytes = 0;
    const protocol::JobSpec &job = data->job();
    RunStore::NewRun row{job.toJson(), job.strategy, job.model, job.dataset, data->workers(), m_cluster, m_outDir};
    const auto id = m_store->createRun(row);
    if (!id) {
        m_error = m_store->errorString();
        Q_EMIT recordingFailed(m_error);
        return false;
    }
    m_runId = *id;
    m_timer.start();
    return true;
}

void RunRecorder::resume(qint64 runId, const RunData *data)
{
    m_data = data;
    m_runId = runId;
    m_finished = false;
    m_reported = false;
    m_written.clear();
    m_samples = m_bytes = 0;
    for (int w = 0; w < data->workers(); ++w) {
        m_written.append(data->rounds(w).size());
        for (const auto &r : data->rounds(w)) {
            m_samples += r.batch;
            m_bytes += r.bytesSent;
        }
    }
    m_segmentStart = m_written;
    m_evalsWritten = data->evals().size();
    m_mergesWritten = data->merges().size();
    m_dataReportsWritten = data->dataReports();
    m_timer.start();
}

bool RunRecorder::flush()
{
    if (!isRecording())
        return false;
    return write(false, QStringLiteral("running"), QString());
}

bool RunRecorder::finish(bool ok, const QString &message)
{
    if (!isRecording())
        return m_finished;
    m_timer.stop();
    const bool written = write(true, ok ? QStringLiteral("finished") : QStringLiteral("failed"), message);
    m_finished = written;
    return written;
}

bool RunRecorder::write(bool final, const QString &status, const QString &message)
{
    const RunData &d = *m_data;
    auto written = m_written;
    auto segmentStart = m_segmentStart;
    qint64 samples = m_samples, bytes = m_bytes;
    bool ok = m_store->beginTransaction();
    for (int w = 0; ok && w < d.workers(); ++w) {
        const auto &rounds = d.rounds(w);
        const qsizetype n = rounds.size();
        for (qsizetype i = written[w]; i < n; ++i) {
            samples += rounds[i].batch;
            bytes += rounds[i].bytesSent;
        }
        // Compact when the open segment is long enough, and at the end when
        // it holds more than one chunk.
        const bool compact = n - segmentStart[w] >= m_compactRounds
            || (final && n > segmentStart[w] && written[w] > segmentStart[w]);
        if (compact) {
            ok = m_store->replaceRounds(m_runId, w, segmentStart[w], rounds, segmentStart[w], n);
            segmentStart[w] = n;
        } else {
            ok = m_store->appendRounds(m_runId, w, written[w], rounds, written[w], n);
        }
        written[w] = n;
    }
    ok = ok && m_store->appendEvals(m_runId, d.evals(), m_evalsWritten)
        && m_store->appendMerges(m_runId, d.merges(), m_mergesWritten);
    RunStore::Progress p;
    p.status = status;
    p.message = message;
    p.startedAt = d.startedAt();
    p.endedAt = final ? (d.endedAt().isValid() ? d.endedAt() : QDateTime::currentDateTimeUtc()) : QDateTime();
    const auto eval = d.lastGlobalEval();
    p.finalAccuracy = eval ? eval->globalAccuracy : 0.0;
    p.trainS = d.trainingSeconds();
    p.samplesPerS = p.trainS > 0 ? double(samples) / p.trainS : 0.0;
    p.bytesSent = bytes;
    p.merges = int(d.merges().size());
    // Outcomes come at the end; data summaries as workers start.
    const bool outcomes = final || d.dataReports() != m_dataReportsWritten;
    ok = ok && m_store->updateRun(m_runId, p) && (!outcomes || m_store->setWorkerOutcomes(m_runId, d))
        && m_store->commit();
    if (!ok) {
        m_store->rollback();
        m_error = m_store->errorString();
        qCWarning(lcStore) << "recording run" << m_runId << "failed:" << m_error;
        if (!m_reported) {
            m_reported = true;
            Q_EMIT recordingFailed(m_error);
        }
        return false;
    }
    m_written = written;
    m_segmentStart = segmentStart;
    m_evalsWritten = d.evals().size();
    m_mergesWritten = d.merges().size();
    m_dataReportsWritten = d.dataReports();
    m_samples = samples;
    m_bytes = bytes;
    Q_EMIT committed(m_runId);
    return true;
}

} // namespace dlion::core
