// RunStore: writing. Each call runs in the caller's transaction when one is
// open, else in its own (SQLite's autocommit).
#include "round_series_codec.h"
#include "run_store.h"
#include "run_store_private.h"

#include <QCborMap>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSqlError>
#include <QSqlQuery>
#include <QSysInfo>

#include <unistd.h>

namespace dlion::core {

using namespace storedetail;

std::optional<qint64> RunStore::createRun(const NewRun &run)
{
    if (!requireWritable())
        return std::nullopt;
    QSqlQuery q(d->db());
    q.prepare(QStringLiteral(
        "INSERT INTO runs (created_at, status, strategy, model, dataset, workers, spec_json, cluster_json,"
        " code_version, host, writer_pid, out_dir, final_accuracy, train_s, samples_per_s, bytes_sent, merges)"
        " VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, 0, 0)"));
    for (const QVariant &v : QVariantList{isoOrNull(QDateTime::currentDateTimeUtc()), run.strategy, run.model,
                                          run.dataset, run.workers, dump(run.spec), dump(run.cluster), codeVersion(),
                                          QSysInfo::machineHostName(), qint64(::getpid()), run.outDir})
        q.addBindValue(v);
    if (!q.exec()) {
        failQuery(q.lastError());
        return std::nullopt;
    }
    return q.lastInsertId().toLongLong();
}

bool RunStore::appendRounds(qint64 runId, int worker, qsizetype firstIndex, const QList<protocol::RoundRecord> &rounds,
                            qsizetype from, qsizetype to)
{
    if (to <= from)
        return true;
    const bool migratingCopy = d->copy != nullptr;  // a reader's private copy is migrated in place
    if (!migratingCopy && !requireWritable())
        return false;
    return exec(QStringLiteral("INSERT INTO round_chunks (run_id, worker, first_index, count, t_first, t_last, data)"
                               " VALUES (?, ?, ?, ?, ?, ?, ?)"),
                {runId, worker, qint64(firstIndex), qint64(to - from), rounds[from].t, rounds[to - 1].t,
                 roundseries::encode(rounds, from, to)});
}

bool RunStore::replaceRounds(qint64 runId, int worker, qsizetype firstIndex, const QList<protocol::RoundRecord> &rounds,
                             qsizetype from, qsizetype to)
{
    if (!requireWritable())
        return false;
    return exec(QStringLiteral("DELETE FROM round_chunks WHERE run_id = ? AND worker = ? AND first_index >= ?"),
                {runId, worker, qint64(firstIndex)})
        && appendRounds(runId, worker, firstIndex, rounds, from, to);
}

bool RunStore::appendEvals(qint64 runId, const QList<protocol::EvalRecord> &evals, qsizetype from)
{
    if (!requireWritable())
        return false;
    for (qsizetype i = from; i < evals.size(); ++i) {
        const auto &e = evals[i];
        if (!exec(QStringLiteral("INSERT INTO evals (run_id, worker, round, t, accuracy, loss, global_accuracy,"
                                 " global_loss, samples, final, min_accuracy, max_accuracy, consensus_accuracy)"
                                 " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                  {runId, e.worker, e.round, e.t, e.accuracy, e.loss, e.globalAccuracy, e.globalLoss, e.samples,
                   int(e.final), e.minAccuracy, e.maxAccuracy, e.consensusAccuracy}))
            return false;
    }
    return true;
}

bool RunStore::appendMerges(qint64 runId, const QList<protocol::MergeEvent> &merges, qsizetype from)
{
    if (!requireWritable())
        return false;
    for (qsizetype i = from; i < merges.size(); ++i) {
        const auto &m = merges[i];
        if (!exec(QStringLiteral("INSERT INTO merges (run_id, round, t, from_worker, to_worker, alpha, score_before,"
                                 " score_from, manual) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                  {runId, m.round, m.t, m.from, m.to, m.alpha, m.scoreBefore, m.scoreFrom, int(m.manual)}))
            return false;
    }
    return true;
}

bool RunStore::updateRun(qint64 runId, const Progress &p)
{
    if (!requireWritable())
        return false;
    return exec(QStringLiteral("UPDATE runs SET status = ?, message = ?, started_at = ?, ended_at = ?,"
                               " final_accuracy = ?, train_s = ?, samples_per_s = ?, bytes_sent = ?, merges = ?"
                               " WHERE id = ?"),
                {p.status, p.message, isoOrNull(p.startedAt), isoOrNull(p.endedAt), p.finalAccuracy, p.trainS,
                 p.samplesPerS, p.bytesSent, p.merges, runId});
}

bool RunStore::setWorkerOutcomes(qint64 runId, const RunData &data)
{
    if (!requireWritable())
        return false;
    QJsonArray list;
    for (int w = 0; w < data.workers(); ++w) {
        const auto &summary = data.dataSummary(w);
        list.append(QJsonObject{{"outcome", data.outcome(w).toJsonObject()},
                                {"lost", data.lostReason(w).isEmpty() ? QJsonValue() : QJsonValue(data.lostReason(w))},
                                {"data", summary ? QJsonValue(protocol::toJson(*summary)) : QJsonValue()}});
    }
    return exec(QStringLiteral("UPDATE runs SET outcomes_json = ? WHERE id = ?"),
                {QString::fromUtf8(QJsonDocument(list).toJson(QJsonDocument::Compact)), runId});
}

bool RunStore::deleteRun(qint64 id)
{
    if (!requireWritable() || !requireRun(id))
        return false;
    const bool outer = d->inTransaction;
    if (!beginTransaction())
        return false;
    for (const char *table : {"round_chunks", "evals", "merges", "notes", "tags"}) {
        if (!exec(QStringLiteral("DELETE FROM %1 WHERE run_id = ?").arg(QLatin1String(table)), {id})) {
            if (!outer)
                rollback();
            return false;
        }
    }
    if (!exec(QStringLiteral("DELETE FROM runs WHERE id = ?"), {id})) {
        if (!outer)
            rollback();
        return false;
    }
    return outer || commit();
}

bool RunStore::addTag(qint64 id, const QString &tag)
{
    if (tag.trimmed().isEmpty())
        return fail(Error::Io, QStringLiteral("a tag cannot be empty"));
    return requireWritable() && requireRun(id)
        && exec(QStringLiteral("INSERT OR IGNORE INTO tags (run_id, tag) VALUES (?, ?)"), {id, tag.trimmed()});
}

bool RunStore::removeTag(qint64 id, const QString &tag)
{
    return requireWritable() && requireRun(id)
        && exec(QStringLiteral("DELETE FROM tags WHERE run_id = ? AND tag = ?"), {id, tag.trimmed()});
}

std::optional<qint64> RunStore::addNote(qint64 id, const QString &text)
{
    if (!requireWritable() || !requireRun(id))
        return std::nullopt;
    QSqlQuery q(d->db());
    q.prepare(QStringLiteral("INSERT INTO notes (run_id, created_at, text) VALUES (?, ?, ?)"));
    q.addBindValue(id);
    q.addBindValue(isoOrNull(QDateTime::currentDateTimeUtc()));
    q.addBindValue(text);
    if (!q.exec()) {
        failQuery(q.lastError());
        return std::nullopt;
    }
    return q.lastInsertId().toLongLong();
}

} // namespace dlion::core
