// RunStore: reading (list, search, load). Nothing here writes.
#include "round_series_codec.h"
#include "run_store.h"
#include "run_store_private.h"

#include <QCborMap>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSqlError>
#include <QSqlQuery>

namespace dlion::core {

using namespace storedetail;

std::optional<RunInfo> RunStore::readInfo(qint64 id)
{
    QSqlQuery q(d->db());
    q.prepare(QStringLiteral("SELECT %1 FROM runs WHERE id = ?").arg(QLatin1String(kInfoColumns)));
    q.addBindValue(id);
    if (!q.exec()) {
        failQuery(q.lastError());
        return std::nullopt;
    }
    if (!q.next()) {
        fail(Error::UnknownRun, QStringLiteral("no run %1 in %2 (see 'dlion runs' for run ids)").arg(id).arg(m_path));
        return std::nullopt;
    }
    RunInfo info = infoFromRow(q);
    q.finish();
    q.prepare(QStringLiteral("SELECT tag FROM tags WHERE run_id = ? ORDER BY tag"));
    q.addBindValue(id);
    if (!q.exec()) {
        failQuery(q.lastError());
        return std::nullopt;
    }
    while (q.next())
        info.tags << q.value(0).toString();
    q.prepare(QStringLiteral("SELECT id, created_at, text FROM notes WHERE run_id = ? ORDER BY id"));
    q.addBindValue(id);
    if (!q.exec()) {
        failQuery(q.lastError());
        return std::nullopt;
    }
    while (q.next())
        info.notes.append({q.value(0).toLongLong(), fromIso(q.value(1)), q.value(2).toString()});
    return info;
}

std::optional<RunInfo> RunStore::runInfo(qint64 id)
{
    if (!isOpen()) {
        fail(Error::Io, QStringLiteral("the run store is not open"));
        return std::nullopt;
    }
    return readInfo(id);
}

QList<RunInfo> RunStore::listRuns(const RunFilter &filter)
{
    QList<RunInfo> result;
    m_errorKind = Error::None;
    m_error.clear();
    if (!isOpen() || !d->hasSchema)
        return result;  // an empty file holds no runs
    QStringList where;
    QVariantList binds;
    if (!filter.strategy.isEmpty()) {
        where << QStringLiteral("strategy = ?");
        binds << filter.strategy;
    }
    if (!filter.tag.isEmpty()) {
        where << QStringLiteral("EXISTS (SELECT 1 FROM tags t WHERE t.run_id = runs.id AND t.tag = ?)");
        binds << filter.tag;
    }
    if (!filter.search.isEmpty()) {
        const QString like = QLatin1Char('%') + filter.search + QLatin1Char('%');
        where << QStringLiteral(
            "(CAST(id AS TEXT) = ? OR strategy LIKE ? OR model LIKE ? OR dataset LIKE ? OR message LIKE ?"
            " OR out_dir LIKE ? OR created_at LIKE ?"
            " OR EXISTS (SELECT 1 FROM tags t WHERE t.run_id = runs.id AND t.tag LIKE ?)"
            " OR EXISTS (SELECT 1 FROM notes n WHERE n.run_id = runs.id AND n.text LIKE ?))");
        binds << filter.search << like << like << like << like << like << like << like << like;
    }
    QString sql = QStringLiteral("SELECT %1 FROM runs").arg(QLatin1String(kInfoColumns));
    if (!where.isEmpty())
        sql += QStringLiteral(" WHERE ") + where.join(QStringLiteral(" AND "));
    sql += QStringLiteral(" ORDER BY id DESC");
    QSqlQuery q(d->db());
    q.setForwardOnly(true);
    q.prepare(sql);
    for (const QVariant &v : binds)
        q.addBindValue(v);
    if (!q.exec()) {
        failQuery(q.lastError());
        return result;
    }
    while (q.next()) {
        RunInfo info = infoFromRow(q);
        if (!filter.status.isEmpty() && info.status != filter.status)
            continue;
        result.append(info);
        if (filter.limit > 0 && result.size() >= filter.limit)
            break;
    }
    q.finish();
    if (q.lastError().isValid()) {
        failQuery(q.lastError());
        return {};
    }
    // Tags for the listed runs (notes only with runInfo/loadRun).
    QSqlQuery t(d->db());
    t.setForwardOnly(true);
    if (!t.exec(QStringLiteral("SELECT run_id, tag FROM tags ORDER BY tag"))) {
        failQuery(t.lastError());
        return {};
    }
    QHash<qint64, QStringList> tags;
    while (t.next())
        tags[t.value(0).toLongLong()] << t.value(1).toString();
    for (RunInfo &info : result)
        info.tags = tags.value(info.id);
    return result;
}

std::optional<StoredRun> RunStore::loadRun(qint64 id)
{
    if (!isOpen()) {
        fail(Error::Io, QStringLiteral("the run store is not open"));
        return std::nullopt;
    }
    auto info = readInfo(id);
    if (!info)
        return std::nullopt;
    StoredRun run;
    run.info = *info;
    QString specError;
    auto spec = protocol::JobSpec::fromJson(info->spec, &specError);
    protocol::JobSpec job = spec.value_or(protocol::JobSpec());
    if (!spec) {
        // A spec an older or newer version wrote: keep what identifies the run.
        job.strategy = info->strategy;
        job.model = info->model;
        job.dataset = info->dataset;
    }
    run.data.reset(job, info->workers);

    auto failed = [&](const QSqlQuery &q) {
        failQuery(q.lastError());
        return std::nullopt;
    };
    protocol::TelemetryBatch batch;
    QSqlQuery q(d->db());
    q.setForwardOnly(true);
    q.prepare(QStringLiteral("SELECT worker, data FROM round_chunks WHERE run_id = ? ORDER BY worker, first_index"));
    q.addBindValue(id);
    if (!q.exec())
        return failed(q);
    while (q.next()) {
        QString why;
        if (!roundseries::decode(q.value(1).toByteArray(), q.value(0).toInt(), &batch.rounds, &why)) {
            fail(Error::Corrupt, QStringLiteral("%1 is not a readable DLion run store (run %2: %3); it was not modified")
                                     .arg(m_path).arg(id).arg(why));
            return std::nullopt;
        }
    }
    if (q.lastError().isValid())
        return failed(q);
    q.prepare(QStringLiteral("SELECT worker, round, t, accuracy, loss, global_accuracy, global_loss, samples, final,"
                             " min_accuracy, max_accuracy, consensus_accuracy FROM evals WHERE run_id = ? ORDER BY rowid"));
    q.addBindValue(id);
    if (!q.exec())
        return failed(q);
    while (q.next()) {
        protocol::EvalRecord e;
        e.worker = q.value(0).toInt();
        e.round = q.value(1).toLongLong();
        e.t = q.value(2).toDouble();
        e.accuracy = q.value(3).toDouble();
        e.loss = q.value(4).toDouble();
        e.globalAccuracy = q.value(5).toDouble();
        e.globalLoss = q.value(6).toDouble();
        e.samples = q.value(7).toInt();
        e.final = q.value(8).toBool();
        e.minAccuracy = q.value(9).toDouble();
        e.maxAccuracy = q.value(10).toDouble();
        e.consensusAccuracy = q.value(11).toDouble();
        batch.evals.append(e);
    }
    protocol::markPrimaryEvals(batch.evals);
    q.prepare(QStringLiteral("SELECT round, t, from_worker, to_worker, alpha, score_before, score_from, manual"
                             " FROM merges WHERE run_id = ? ORDER BY rowid"));
    q.addBindValue(id);
    if (!q.exec())
        return failed(q);
    while (q.next()) {
        protocol::MergeEvent m;
        m.round = q.value(0).toLongLong();
        m.t = q.value(1).toDouble();
        m.from = q.value(2).toInt();
        m.to = q.value(3).toInt();
        m.alpha = q.value(4).toDouble();
        m.scoreBefore = q.value(5).toDouble();
        m.scoreFrom = q.value(6).toDouble();
        m.manual = q.value(7).toBool();
        batch.merges.append(m);
    }
    run.data.add(batch);

    q.prepare(QStringLiteral("SELECT outcomes_json FROM runs WHERE id = ?"));
    q.addBindValue(id);
    if (!q.exec())
        return failed(q);
    if (q.next()) {
        const QJsonArray outcomes = QJsonDocument::fromJson(q.value(0).toString().toUtf8()).array();
        for (int w = 0; w < std::min<int>(int(outcomes.size()), info->workers); ++w) {
            const QJsonObject o = outcomes[w].toObject();
            run.data.setOutcome(w, QCborMap::fromJsonObject(o.value("outcome").toObject()));
            if (!o.value("lost").toString().isEmpty())
                run.data.setWorkerLost(w, o.value("lost").toString());
            if (const auto summary = protocol::dataSummaryFromJson(o.value("data").toObject()))
                run.data.setDataSummary(*summary);
        }
    }
    run.data.restoreTimes(info->startedAt, info->endedAt, info->status == QLatin1String("finished"), info->message);
    return run;
}

std::optional<qint64> RunStore::resolve(const QString &text)
{
    const QString s = text.trimmed();
    if (!isOpen()) {
        fail(Error::Io, QStringLiteral("the run store is not open"));
        return std::nullopt;
    }
    if (s == QLatin1String("last") || s == QLatin1String("latest")) {
        QSqlQuery q(d->db());
        if (!d->hasSchema || !q.exec(QStringLiteral("SELECT MAX(id) FROM runs")) || !q.next() || q.value(0).isNull()) {
            if (q.lastError().isValid())
                failQuery(q.lastError());
            else
                fail(Error::UnknownRun, QStringLiteral("%1 holds no runs yet").arg(m_path));
            return std::nullopt;
        }
        return q.value(0).toLongLong();
    }
    bool ok = false;
    const qint64 id = (s.startsWith(QLatin1Char('#')) ? s.mid(1) : s).toLongLong(&ok);
    if (!ok || id <= 0) {
        fail(Error::UnknownRun, QStringLiteral("\"%1\" is not a run id (a number, or 'last'; see 'dlion runs')").arg(text));
        return std::nullopt;
    }
    if (!d->hasSchema) {
        fail(Error::UnknownRun, QStringLiteral("no run %1 in %2 (see 'dlion runs' for run ids)").arg(id).arg(m_path));
        return std::nullopt;
    }
    if (!requireRun(id))
        return std::nullopt;
    return id;
}

QStringList RunStore::allTags()
{
    QStringList out;
    QSqlQuery q(d->db());
    if (isOpen() && d->hasSchema && q.exec(QStringLiteral("SELECT DISTINCT tag FROM tags ORDER BY tag"))) {
        while (q.next())
            out << q.value(0).toString();
    }
    return out;
}

QStringList RunStore::allStrategies()
{
    QStringList out;
    QSqlQuery q(d->db());
    if (isOpen() && d->hasSchema && q.exec(QStringLiteral("SELECT DISTINCT strategy FROM runs ORDER BY strategy"))) {
        while (q.next())
            out << q.value(0).toString();
    }
    return out;
}

qint64 RunStore::countRows(const QString &table, qint64 runId)
{
    static const QStringList known = {"runs", "round_chunks", "evals", "merges", "notes", "tags"};
    if (!isOpen() || !known.contains(table) || !d->hasSchema)
        return -1;
    QSqlQuery q(d->db());
    const QString column = table == QLatin1String("runs") ? QStringLiteral("id") : QStringLiteral("run_id");
    const QString sql = runId > 0 ? QStringLiteral("SELECT COUNT(*) FROM %1 WHERE %2 = %3").arg(table, column).arg(runId)
                                  : QStringLiteral("SELECT COUNT(*) FROM %1").arg(table);
    if (!q.exec(sql) || !q.next())
        return -1;
    return q.value(0).toLongLong();
}

} // namespace dlion::core
