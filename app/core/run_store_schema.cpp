// The run store's schema and its migrations (see run_store.h).
//
// History:
//   v1  runs (summary columns only), rounds as one row per worker per round,
//       evals and merges with fewer columns, notes, tags.
//   v2  runs gain start/end times, message, cluster, code version, host,
//       writer pid, run folder, samples/s, merges and worker outcomes; rounds
//       become packed per-worker chunks (round_chunks) — a 1-hour 8-worker
//       run went from ~400 MB to well under 100 MB; evals and merges gain
//       the fields the telemetry carries.
//   v3  evals gain min_accuracy, max_accuracy and consensus_accuracy: every
//       replica is scored on the same test subset, global_accuracy is the
//       mean replica. Older evals keep NULL there (shards summed).
//   v4  cluster_json has one layout whichever face wrote it (run_recorder.h):
//       DLion Studio recorded an SSH run's hosts as plain names, a local run
//       with a copy of the job's emulation and without its host.
#include "round_series_codec.h"
#include "run_store.h"
#include "run_store_private.h"

#include <QJsonArray>
#include <QSqlError>
#include <QSqlQuery>

namespace dlion::core {

using namespace storedetail;

namespace {

// A v3 cluster_json in the v4 layout; `host` is the run row's.
QJsonObject clusterInV4Layout(QJsonObject cluster, const QString &host)
{
    const QString kind = cluster.value("kind").toString();
    if (kind == QLatin1String("local")) {
        cluster.remove("emulation");  // the job holds it
        if (!cluster.contains("host"))
            cluster.insert("host", host);
    } else if (kind == QLatin1String("ssh")) {
        QJsonArray hosts;
        for (const QJsonValue &h : cluster.value("hosts").toArray())
            hosts.append(h.isString() ? QJsonObject{{"name", h.toString()}} : h);
        cluster.insert("hosts", hosts);
        cluster.insert("workers", int(hosts.size()));
    }
    return cluster;
}

const char *const kSchema[] = {
    "CREATE TABLE runs ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " created_at TEXT NOT NULL, started_at TEXT, ended_at TEXT,"
    " status TEXT NOT NULL, message TEXT,"
    " strategy TEXT, model TEXT, dataset TEXT, workers INTEGER,"
    " spec_json TEXT NOT NULL, cluster_json TEXT, code_version TEXT, host TEXT, writer_pid INTEGER,"
    " out_dir TEXT, final_accuracy REAL, train_s REAL, samples_per_s REAL, bytes_sent INTEGER,"
    " merges INTEGER, outcomes_json TEXT)",
    "CREATE TABLE round_chunks ("
    " run_id INTEGER NOT NULL, worker INTEGER NOT NULL, first_index INTEGER NOT NULL,"
    " count INTEGER NOT NULL, t_first REAL, t_last REAL, data BLOB NOT NULL)",
    "CREATE UNIQUE INDEX round_chunks_key ON round_chunks (run_id, worker, first_index)",
    "CREATE TABLE evals ("
    " run_id INTEGER NOT NULL, worker INTEGER, round INTEGER, t REAL, accuracy REAL, loss REAL,"
    " global_accuracy REAL, global_loss REAL, samples INTEGER, final INTEGER,"
    " min_accuracy REAL, max_accuracy REAL, consensus_accuracy REAL)",
    "CREATE INDEX evals_run ON evals (run_id)",
    "CREATE TABLE merges ("
    " run_id INTEGER NOT NULL, round INTEGER, t REAL, from_worker INTEGER, to_worker INTEGER,"
    " alpha REAL, score_before REAL, score_from REAL, manual INTEGER)",
    "CREATE INDEX merges_run ON merges (run_id)",
    "CREATE TABLE notes (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id INTEGER NOT NULL, created_at TEXT, text TEXT)",
    "CREATE INDEX notes_run ON notes (run_id)",
    "CREATE TABLE tags (run_id INTEGER NOT NULL, tag TEXT NOT NULL, PRIMARY KEY (run_id, tag))",
    "CREATE INDEX tags_tag ON tags (tag)",
};

} // namespace

bool RunStore::createSchema()
{
    if (!beginTransaction())
        return false;
    for (const char *sql : kSchema) {
        if (!exec(QString::fromLatin1(sql))) {
            rollback();
            return false;
        }
    }
    if (!exec(QStringLiteral("PRAGMA user_version = %1").arg(kSchemaVersion)) || !commit()) {
        rollback();
        return false;
    }
    return true;
}

bool RunStore::migrate(int from)
{
    if (!beginTransaction())
        return false;
    bool ok = true;
    if (from < 2)
        ok = migrateV1toV2();
    for (const char *sql : {"ALTER TABLE evals ADD COLUMN min_accuracy REAL", "ALTER TABLE evals ADD COLUMN max_accuracy REAL",
                            "ALTER TABLE evals ADD COLUMN consensus_accuracy REAL"})
        ok = ok && (from >= 3 || exec(QString::fromLatin1(sql)));
    ok = ok && (from >= 4 || migrateV3toV4());
    ok = ok && exec(QStringLiteral("PRAGMA user_version = %1").arg(kSchemaVersion)) && commit();
    if (!ok) {
        const QString why = m_error;
        rollback();
        return fail(Error::Io, QStringLiteral("cannot migrate %1 from schema v%2: %3").arg(m_path).arg(from).arg(why));
    }
    return true;
}

bool RunStore::migrateV1toV2()
{
    const char *const alters[] = {
        "ALTER TABLE runs ADD COLUMN started_at TEXT",     "ALTER TABLE runs ADD COLUMN ended_at TEXT",
        "ALTER TABLE runs ADD COLUMN message TEXT",        "ALTER TABLE runs ADD COLUMN cluster_json TEXT",
        "ALTER TABLE runs ADD COLUMN code_version TEXT",   "ALTER TABLE runs ADD COLUMN host TEXT",
        "ALTER TABLE runs ADD COLUMN writer_pid INTEGER",  "ALTER TABLE runs ADD COLUMN out_dir TEXT",
        "ALTER TABLE runs ADD COLUMN samples_per_s REAL",  "ALTER TABLE runs ADD COLUMN merges INTEGER",
        "ALTER TABLE runs ADD COLUMN outcomes_json TEXT",  "ALTER TABLE evals ADD COLUMN samples INTEGER",
        "ALTER TABLE evals ADD COLUMN final INTEGER",      "ALTER TABLE merges ADD COLUMN score_before REAL",
        "ALTER TABLE merges ADD COLUMN score_from REAL",   "ALTER TABLE merges ADD COLUMN manual INTEGER",
        "UPDATE runs SET started_at = created_at",
        "UPDATE runs SET merges = (SELECT COUNT(*) FROM merges m WHERE m.run_id = runs.id)",
        "UPDATE runs SET samples_per_s = (SELECT SUM(batch) FROM rounds r WHERE r.run_id = runs.id) / train_s"
        " WHERE train_s > 0",
        "CREATE INDEX IF NOT EXISTS evals_run ON evals (run_id)",
        "CREATE INDEX IF NOT EXISTS merges_run ON merges (run_id)",
        "CREATE INDEX IF NOT EXISTS notes_run ON notes (run_id)",
        "CREATE INDEX IF NOT EXISTS tags_tag ON tags (tag)",
    };
    for (const char *sql : alters) {
        if (!exec(QString::fromLatin1(sql)))
            return false;
    }
    if (!exec(QString::fromLatin1(kSchema[1])) || !exec(QString::fromLatin1(kSchema[2])))
        return false;

    // v1 kept one row per round; pack each worker's rounds into chunks.
    QSqlQuery q(d->db());
    q.setForwardOnly(true);
    if (!q.exec(QStringLiteral("SELECT run_id, worker, round, t, batch, share, rate, loss, bytes_sent"
                               " FROM rounds ORDER BY run_id, worker, round")))
        return fail(Error::Io, q.lastError().text());
    QList<protocol::RoundRecord> pending;
    qint64 runId = -1;
    int worker = -1;
    qsizetype index = 0;
    auto flush = [&]() {
        for (qsizetype from = 0; from < pending.size(); from += 4096) {
            const qsizetype to = std::min(pending.size(), from + 4096);
            if (!appendRounds(runId, worker, index + from, pending, from, to))
                return false;
        }
        index += pending.size();
        pending.clear();
        return true;
    };
    while (q.next()) {
        const qint64 r = q.value(0).toLongLong();
        const int w = q.value(1).toInt();
        if (r != runId || w != worker) {
            if (!flush())
                return false;
            index = 0;
            runId = r;
            worker = w;
        }
        protocol::RoundRecord rec;
        rec.worker = w;
        rec.round = q.value(2).toLongLong();
        rec.t = q.value(3).toDouble();
        rec.batch = q.value(4).toInt();
        rec.share = q.value(5).toDouble();
        rec.rate = q.value(6).toDouble();
        rec.loss = q.value(7).toDouble();
        rec.bytesSent = q.value(8).toLongLong();
        pending.append(rec);
    }
    if (!flush())
        return false;
    q.finish();
    return exec(QStringLiteral("DROP TABLE rounds"));
}

bool RunStore::migrateV3toV4()
{
    QSqlQuery q(d->db());
    if (!q.exec(QStringLiteral("SELECT id, cluster_json, host FROM runs WHERE cluster_json IS NOT NULL")))
        return fail(Error::Io, q.lastError().text());
    QList<std::pair<qint64, QString>> changed;
    while (q.next()) {
        const QJsonObject before = parseObject(q.value(1));
        const QJsonObject after = clusterInV4Layout(before, q.value(2).toString());
        if (after != before)
            changed.append({q.value(0).toLongLong(), dump(after)});
    }
    q.finish();
    for (const auto &[id, cluster] : std::as_const(changed)) {
        if (!exec(QStringLiteral("UPDATE runs SET cluster_json = ? WHERE id = ?"), {cluster, id}))
            return false;
    }
    return true;
}

} // namespace dlion::core
