#include "run_data.h"

#include <QJsonArray>

#include <algorithm>
#include <atomic>
#include <cmath>

namespace dlion::core {

quint64 RunData::nextResetId()
{
    static std::atomic<quint64> next{0};
    return ++next;
}

QString finalModelFileName(const QString &format)
{
    return format == QLatin1String("torchscript") ? QStringLiteral("model.pt") : QStringLiteral("model_state_dict.pt");
}

void RunData::reset(const protocol::JobSpec &job, int workers)
{
    *this = RunData();
    m_job = job;
    m_rounds = QList<QList<protocol::RoundRecord>>(workers);
    m_outcomes = QList<QCborMap>(workers);
    m_lost = QStringList(workers);
    m_data = QList<std::optional<protocol::DataSummary>>(workers);
}

namespace {
// The store keeps training times in microseconds: a re-sent record matches
// what was stored at that precision.
qint64 micros(double t) { return std::llround(t * 1e6); }
} // namespace

void RunData::add(const protocol::TelemetryBatch &batch)
{
    // A round number may repeat (a round redone after a regroup, or a count
    // adopted from a worker behind): only re-sent copies are dropped.
    for (const auto &r : batch.rounds) {
        if (r.worker >= 0 && r.worker < m_rounds.size()
            && (m_resendable.isEmpty() || !m_resendable[r.worker].contains({r.round, micros(r.t)})))
            m_rounds[r.worker].append(r);
    }
    for (const auto &e : batch.evals) {
        const bool seen = m_resendableEvals > 0
            && std::any_of(m_evals.cbegin(), m_evals.cbegin() + m_resendableEvals, [&](const protocol::EvalRecord &k) {
                   return k.worker == e.worker && k.round == e.round && k.final == e.final && micros(k.t) == micros(e.t);
               });
        if (!seen)
            m_evals.append(e);
    }
    // Every worker reports the merges it took part in; keep each event once.
    for (const auto &m : batch.merges) {
        const bool seen = std::any_of(m_merges.begin(), m_merges.end(), [&](const protocol::MergeEvent &e) {
            return e.round == m.round && e.from == m.from && e.to == m.to;
        });
        if (!seen)
            m_merges.append(m);
    }
    for (const auto &d : batch.data)
        setDataSummary(d);
}

void RunData::expectResends()
{
    // Agents keep at most ~100k records unacknowledged: older ones cannot come again.
    constexpr qsizetype kWindow = 131072;
    m_resendable.clear();
    for (const auto &rounds : std::as_const(m_rounds)) {
        std::set<std::pair<qint64, qint64>> keys;
        for (qsizetype i = qMax<qsizetype>(0, rounds.size() - kWindow); i < rounds.size(); ++i)
            keys.emplace(rounds[i].round, micros(rounds[i].t));
        m_resendable.append(std::move(keys));
    }
    m_resendableEvals = m_evals.size();
}

void RunData::setOutcome(int worker, const QCborMap &outcome)
{
    if (worker < 0 || worker >= m_outcomes.size())
        return;
    // The model's files stay here; their description stays in the outcome
    // (and so in the run store and summary.json).
    QCborMap kept = outcome;
    if (const QCborValue model = kept.take(QStringLiteral("model")); model.isByteArray())
        m_finalModel = model.toByteArray();
    if (const QCborValue state = kept.take(QStringLiteral("model_state_dict")); state.isByteArray())
        m_finalStateDict = state.toByteArray();
    if (kept.contains(QStringLiteral("model_info")))
        m_finalModelInfo = kept.value(QStringLiteral("model_info")).toMap();
    m_outcomes[worker] = kept;
}

void RunData::setWorkerLost(int worker, const QString &reason)
{
    if (worker >= 0 && worker < m_lost.size())
        m_lost[worker] = reason;
}

void RunData::setDataSummary(const protocol::DataSummary &summary)
{
    if (summary.worker >= 0 && summary.worker < m_data.size()) {
        m_data[summary.worker] = summary;
        ++m_dataReports;
    }
}

void RunData::markEnded(bool ok, const QString &message)
{
    m_ended = QDateTime::currentDateTimeUtc();
    m_ok = ok;
    m_message = message;
}

const protocol::RoundRecord *RunData::lastRound(int worker) const
{
    if (worker < 0 || worker >= m_rounds.size() || m_rounds[worker].isEmpty())
        return nullptr;
    return &m_rounds[worker].constLast();
}

std::optional<protocol::EvalRecord> RunData::lastGlobalEval() const
{
    for (auto it = m_evals.crbegin(); it != m_evals.crend(); ++it) {
        if (it->primary)
            return *it;
    }
    return std::nullopt;
}

std::optional<double> RunData::timeToAccuracy(double target) const
{
    for (const auto &e : m_evals) {
        if (e.primary && e.globalAccuracy >= target)
            return e.t;
    }
    return std::nullopt;
}

qint64 RunData::totalSamples() const
{
    qint64 n = 0;
    for (const auto &list : m_rounds) {
        for (const auto &r : list)
            n += r.batch;
    }
    return n;
}

qint64 RunData::totalBytesSent() const
{
    qint64 n = 0;
    for (const auto &list : m_rounds) {
        for (const auto &r : list)
            n += r.bytesSent;
    }
    return n;
}

double RunData::trainingSeconds() const
{
    double t = 0;
    for (const auto &list : m_rounds) {
        if (!list.isEmpty())
            t = std::max(t, list.constLast().t);
    }
    for (const auto &e : m_evals)
        t = std::max(t, e.t);
    return t;
}

QJsonObject RunData::summary() const
{
    const double trainS = trainingSeconds();
    const auto finalEval = lastGlobalEval();
    QJsonObject tta;
    QList<double> targets = {0.80, 0.85};
    if (m_job.budget.targetAccuracy > 0 && !targets.contains(m_job.budget.targetAccuracy))
        targets.append(m_job.budget.targetAccuracy);
    for (double target : targets) {
        const auto t = timeToAccuracy(target);
        tta.insert(QString::number(target, 'f', 2), t ? QJsonValue(*t) : QJsonValue(QJsonValue::Null));
    }
    QJsonArray rounds, workers;
    for (int w = 0; w < m_rounds.size(); ++w) {
        QJsonArray list;
        double shareSum = 0, rateSum = 0;
        qint64 samples = 0;
        for (const auto &r : m_rounds[w]) {
            list.append(protocol::toJson(r));
            shareSum += r.share;
            rateSum += r.rate;
            samples += r.batch;
        }
        rounds.append(list);
        const qsizetype n = std::max<qsizetype>(1, m_rounds[w].size());
        workers.append(QJsonObject{{"worker", w},
                                   {"rounds", m_rounds[w].size()},
                                   {"samples", samples},
                                   {"mean_share", shareSum / double(n)},
                                   {"mean_rate", rateSum / double(n)},
                                   {"slowdown", m_job.slowdownFor(w)},
                                   {"outcome", m_outcomes[w].toJsonObject()},
                                   {"data", m_data[w] ? QJsonValue(protocol::toJson(*m_data[w])) : QJsonValue()},
                                   {"lost", m_lost[w].isEmpty() ? QJsonValue() : QJsonValue(m_lost[w])}});
    }
    QJsonArray evals, merges;
    for (const auto &e : m_evals)
        evals.append(protocol::toJson(e));
    for (const auto &m : m_merges)
        merges.append(protocol::toJson(m));
    const double wallS = m_started.isValid() && m_ended.isValid() ? m_started.msecsTo(m_ended) / 1000.0 : trainS;
    return QJsonObject{
        {"strategy", m_job.strategy},
        {"model", m_job.model},
        {"dataset", m_job.dataset},
        {"partition", m_job.partition},
        {"workers", m_rounds.size()},
        {"status", m_ok ? "finished" : "failed"},
        {"message", m_message},
        {"started_at", m_started.toString(Qt::ISODate)},
        {"ended_at", m_ended.toString(Qt::ISODate)},
        {"wall_s", wallS},
        {"train_s", trainS},
        {"samples", totalSamples()},
        {"samples_per_s", trainS > 0 ? double(totalSamples()) / trainS : 0.0},
        {"final_accuracy", finalEval ? finalEval->globalAccuracy : 0.0},
        {"final_min_accuracy", finalEval ? finalEval->minAccuracy : 0.0},
        {"final_max_accuracy", finalEval ? finalEval->maxAccuracy : 0.0},
        {"final_consensus_accuracy", finalEval ? finalEval->consensusAccuracy : 0.0},
        {"evaluation_rule", QString::fromLatin1(kEvaluationRule)},
        {"final_loss", finalEval ? finalEval->globalLoss : 0.0},
        {"time_to_accuracy", tta},
        {"bytes_sent", totalBytesSent()},
        {"merges", m_merges.size()},
        {"final_model", m_finalModelInfo.toJsonObject()},
        {"job", m_job.toJson()},
        {"per_worker", workers},
        {"evals", evals},
        {"merge_events", merges},
        {"rounds", rounds},
    };
}

} // namespace dlion::core
