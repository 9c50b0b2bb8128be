#include "run_store.h"

#include "core_log.h"
#include "round_series_codec.h"
#include "run_store_private.h"

#include <dlion_version.h>

#include <QCborMap>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSqlError>
#include <QSqlQuery>
#include <QSqlRecord>
#include <QStandardPaths>
#include <QSysInfo>
#include <QUuid>

#include <cerrno>
#include <csignal>
#include <unistd.h>

#ifndef DLION_GIT_REV
#define DLION_GIT_REV ""
#endif

namespace dlion::core {

Q_LOGGING_CATEGORY(lcStore, "dlion.store", QtInfoMsg)

namespace storedetail {

QString isoOrNull(const QDateTime &t) { return t.isValid() ? t.toUTC().toString(Qt::ISODateWithMs) : QString(); }
QDateTime fromIso(const QVariant &v) { return v.isNull() ? QDateTime() : QDateTime::fromString(v.toString(), Qt::ISODateWithMs); }
QJsonObject parseObject(const QVariant &v) { return QJsonDocument::fromJson(v.toString().toUtf8()).object(); }
QString dump(const QJsonObject &o) { return QString::fromUtf8(QJsonDocument(o).toJson(QJsonDocument::Compact)); }

QString codeVersion()
{
    const QString rev = QStringLiteral(DLION_GIT_REV);
    return QStringLiteral(DLION_VERSION) + (rev.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(rev));
}

bool looksLikeSqlite(const QString &path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return true;  // let SQLite report the real problem
    const QByteArray head = f.read(16);
    return head.isEmpty() || head == QByteArray("SQLite format 3\0", 16);
}

// The writer of a run that still says "running" is gone: it was killed.
bool writerGone(const QString &host, qint64 pid)
{
    if (pid <= 0 || host != QSysInfo::machineHostName())
        return false;
    return ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}

const char *const kInfoColumns =
    "id, created_at, started_at, ended_at, status, message, strategy, model, dataset, workers, spec_json,"
    " cluster_json, code_version, host, writer_pid, out_dir, final_accuracy, train_s, samples_per_s,"
    " bytes_sent, merges";

RunInfo infoFromRow(const QSqlQuery &q)
{
    RunInfo i;
    i.id = q.value(0).toLongLong();
    i.createdAt = fromIso(q.value(1));
    i.startedAt = fromIso(q.value(2));
    i.endedAt = fromIso(q.value(3));
    i.status = q.value(4).toString();
    i.message = q.value(5).toString();
    i.strategy = q.value(6).toString();
    i.model = q.value(7).toString();
    i.dataset = q.value(8).toString();
    i.workers = q.value(9).toInt();
    i.spec = parseObject(q.value(10));
    i.cluster = parseObject(q.value(11));
    i.codeVersion = q.value(12).toString();
    i.host = q.value(13).toString();
    if (i.status == QLatin1String("running") && writerGone(i.host, q.value(14).toLongLong()))
        i.status = QStringLiteral("interrupted");
    i.outDir = q.value(15).toString();
    i.finalAccuracy = q.value(16).toDouble();
    i.trainS = q.value(17).toDouble();
    i.samplesPerS = q.value(18).toDouble();
    i.bytesSent = q.value(19).toLongLong();
    i.merges = q.value(20).toInt();
    return i;
}

} // namespace storedetail

using namespace storedetail;

QJsonObject RunInfo::toJson() const
{
    QJsonArray noteList;
    for (const RunNote &n : notes)
        noteList.append(QJsonObject{{"id", n.id}, {"created_at", isoOrNull(n.createdAt)}, {"text", n.text}});
    return QJsonObject{{"id", id},
                       {"created_at", isoOrNull(createdAt)},
                       {"started_at", isoOrNull(startedAt)},
                       {"ended_at", isoOrNull(endedAt)},
                       {"status", status},
                       {"message", message},
                       {"strategy", strategy},
                       {"model", model},
                       {"dataset", dataset},
                       {"workers", workers},
                       {"cluster", cluster},
                       {"code_version", codeVersion},
                       {"host", host},
                       {"out_dir", outDir},
                       {"final_accuracy", finalAccuracy},
                       {"train_s", trainS},
                       {"samples_per_s", samplesPerS},
                       {"bytes_sent", bytesSent},
                       {"merges", merges},
                       {"tags", QJsonArray::fromStringList(tags)},
                       {"notes", noteList}};
}

QJsonObject StoredRun::summary() const
{
    QJsonObject s = data.summary();
    if (info.status != QLatin1String("finished") && info.status != QLatin1String("failed"))
        s.insert("status", info.status);
    s.insert("run", info.toJson());
    return s;
}

QString RunStore::defaultRunsDir()
{
    return QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation) + QStringLiteral("/dlion/runs");
}

QString RunStore::defaultPath()
{
    const QString env = qEnvironmentVariable("DLION_STORE");
    if (!env.isEmpty())
        return env;
    return QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation) + QStringLiteral("/dlion/runs.sqlite");
}

RunStore::RunStore() : d(std::make_unique<Impl>()) {}

RunStore::~RunStore() { close(); }

bool RunStore::isOpen() const { return !d->connection.isEmpty() && d->db().isOpen(); }

void RunStore::close()
{
    if (d->connection.isEmpty())
        return;
    {
        QSqlDatabase db = d->db();
        if (d->inTransaction)
            db.rollback();
        db.close();
    }
    QSqlDatabase::removeDatabase(d->connection);
    d->connection.clear();
    d->inTransaction = false;
    d->hasSchema = false;
    d->copy.reset();
}

bool RunStore::fail(Error kind, const QString &message)
{
    m_errorKind = kind;
    m_error = message;
    qCDebug(lcStore) << message;
    return false;
}

bool RunStore::failQuery(const QSqlError &e)
{
    // SQLITE_CORRUPT (11) and SQLITE_NOTADB (26), also as extended codes.
    const int code = e.nativeErrorCode().toInt() & 0xff;
    if (code == 11 || code == 26)
        return fail(Error::Corrupt, QStringLiteral("%1 is not a readable DLion run store (%2); it was not modified")
                                        .arg(m_path, e.databaseText()));
    // SQLITE_IOERR (10) and SQLITE_FULL (13): the write did not happen. A
    // failed commit carries no code, only SQLite's message.
    if (code == 10 || code == 13 || e.databaseText().contains(QLatin1String("disk")))
        return fail(Error::Io, QStringLiteral("cannot write %1: the disk is full or failing (%2); free some space: "
                                              "what was not written stays in memory and is written at the next attempt")
                                   .arg(m_path, e.databaseText()));
    return fail(Error::Io, QStringLiteral("%1: %2").arg(m_path, e.text()));
}

bool RunStore::exec(const QString &sql, const QVariantList &binds)
{
    QSqlQuery q(d->db());
    if (!q.prepare(sql))
        return failQuery(q.lastError());
    for (const QVariant &v : binds)
        q.addBindValue(v);
    if (!q.exec())
        return failQuery(q.lastError());
    return true;
}

bool RunStore::open(const QString &path, Mode mode)
{
    close();
    m_path = path;
    m_mode = mode;
    m_diskVersion = 0;
    m_error.clear();
    m_errorKind = Error::None;
    const QFileInfo fi(path);
    const QString corrupt = QStringLiteral("%1 is not a readable DLion run store (%2); it was not modified");
    if (mode == Mode::ReadOnly && !fi.exists())
        return fail(Error::Missing, QStringLiteral("no run store at %1 yet (record a run with 'dlion run', or pass --store PATH)").arg(path));
    if (fi.exists() && !fi.isFile())
        return fail(Error::Unopenable, QStringLiteral("%1 is not a file").arg(path));
    if (fi.exists() && !looksLikeSqlite(path))
        return fail(Error::Corrupt, corrupt.arg(path, QStringLiteral("not an SQLite database")));
    if (mode == Mode::ReadWrite && !QDir().mkpath(fi.absolutePath()))
        return fail(Error::Unopenable, QStringLiteral("cannot create the folder %1 for the run store").arg(fi.absolutePath()));

    d->connection = QStringLiteral("dlion-store-") + QUuid::createUuid().toString(QUuid::WithoutBraces);
    {
        QSqlDatabase db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), d->connection);
        db.setDatabaseName(path);
        db.setConnectOptions(mode == Mode::ReadOnly ? QStringLiteral("QSQLITE_OPEN_READONLY;QSQLITE_BUSY_TIMEOUT=5000")
                                                    : QStringLiteral("QSQLITE_BUSY_TIMEOUT=5000"));
        if (!db.open()) {
            const QString why = db.lastError().text();
            close();
            return fail(Error::Unopenable, QStringLiteral("cannot open the run store %1: %2").arg(path, why));
        }
    }
    if (!checkStore()) {
        const Error kind = m_errorKind;
        const QString why = m_error;
        close();
        if (kind == Error::Corrupt)
            return fail(kind, corrupt.arg(path, why));
        return fail(kind, why);
    }
    return true;
}

// Validates what open() found and brings the schema up to date: in place
// for a writer, in a temporary copy for a reader.
bool RunStore::checkStore()
{
    QSqlQuery q(d->db());
    if (!q.exec(QStringLiteral("PRAGMA user_version")) || !q.next())
        return fail(Error::Corrupt, q.lastError().text());
    m_diskVersion = q.value(0).toInt();
    if (!q.exec(QStringLiteral("SELECT name FROM sqlite_master WHERE type = 'table'")))
        return fail(Error::Corrupt, q.lastError().text());
    QStringList tables;
    while (q.next())
        tables << q.value(0).toString();
    q.finish();
    if (m_diskVersion > kSchemaVersion)
        return fail(Error::NewerSchema, QStringLiteral("%1 was written by a newer DLion Studio (schema v%2, this one reads up to v%3); it was not modified")
                                            .arg(m_path).arg(m_diskVersion).arg(kSchemaVersion));
    const bool empty = tables.isEmpty() && m_diskVersion == 0;
    d->hasSchema = !empty || m_mode == Mode::ReadWrite;
    if (!empty && (!tables.contains(QStringLiteral("runs")) || m_diskVersion == 0))
        return fail(Error::Corrupt, QStringLiteral("an SQLite database, but not a run store"));

    if (m_mode == Mode::ReadOnly) {
        if (empty)
            return true;  // an empty file: queries return no runs
        // Probe the data pages too: a damaged file often has a valid header.
        if (!q.exec(QStringLiteral("SELECT COUNT(*) FROM runs")) || !q.next())
            return fail(Error::Corrupt, q.lastError().text());
        q.finish();
        if (m_diskVersion == kSchemaVersion)
            return true;
        // Older schema: migrate a private copy, never the file itself.
        auto tmp = std::make_unique<QTemporaryDir>();
        const QString copy = tmp->filePath(QStringLiteral("runs.sqlite"));
        if (!tmp->isValid() || !QFile::copy(m_path, copy)
            || (QFile::exists(m_path + "-wal") && !QFile::copy(m_path + "-wal", copy + "-wal")))
            return fail(Error::Io, QStringLiteral("cannot copy %1 to read its older schema").arg(m_path));
        QSqlDatabase::database(d->connection, false).close();
        QSqlDatabase db = QSqlDatabase::database(d->connection, false);
        db.setDatabaseName(copy);
        db.setConnectOptions(QStringLiteral("QSQLITE_BUSY_TIMEOUT=5000"));
        if (!db.open())
            return fail(Error::Io, db.lastError().text());
        d->copy = std::move(tmp);
        qCInfo(lcStore) << m_path << "uses schema v" << m_diskVersion << "; reading a migrated copy";
        return migrate(m_diskVersion);
    }

    if (!exec(QStringLiteral("PRAGMA journal_mode = WAL")) || !exec(QStringLiteral("PRAGMA synchronous = NORMAL")))
        return fail(Error::Corrupt, m_error);
    if (empty)
        return createSchema();
    if (m_diskVersion < kSchemaVersion) {
        qCInfo(lcStore) << "migrating" << m_path << "from schema v" << m_diskVersion << "to v" << kSchemaVersion;
        return migrate(m_diskVersion);
    }
    return true;
}

bool RunStore::requireWritable()
{
    if (!isOpen())
        return fail(Error::Io, QStringLiteral("the run store is not open"));
    if (m_mode != Mode::ReadWrite || d->copy)
        return fail(Error::Io, QStringLiteral("%1 is open read-only").arg(m_path));
    return true;
}

bool RunStore::requireRun(qint64 id)
{
    QSqlQuery q(d->db());
    q.prepare(QStringLiteral("SELECT 1 FROM runs WHERE id = ?"));
    q.addBindValue(id);
    if (!q.exec())
        return failQuery(q.lastError());
    if (!q.next())
        return fail(Error::UnknownRun, QStringLiteral("no run %1 in %2 (see 'dlion runs' for run ids)").arg(id).arg(m_path));
    return true;
}

bool RunStore::beginTransaction()
{
    if (d->inTransaction)
        return true;
    if (!d->db().transaction())
        return fail(Error::Io, QStringLiteral("%1: %2").arg(m_path, d->db().lastError().text()));
    d->inTransaction = true;
    return true;
}

bool RunStore::commit()
{
    if (!d->inTransaction)
        return true;
    d->inTransaction = false;
    QSqlDatabase db = d->db();
    if (!db.commit()) {
        const QSqlError why = db.lastError();
        db.rollback();
        return failQuery(why);
    }
    return true;
}

void RunStore::rollback()
{
    if (!d->inTransaction)
        return;
    d->inTransaction = false;
    d->db().rollback();
}

} // namespace dlion::core
