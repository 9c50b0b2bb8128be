#pragma once

// Internals shared by run_store.cpp and run_store_schema.cpp.
#include "run_store.h"

#include <QSqlDatabase>
#include <QTemporaryDir>

#include <memory>

class QSqlQuery;

namespace dlion::core {

namespace storedetail {
QString isoOrNull(const QDateTime &t);
QDateTime fromIso(const QVariant &v);
QJsonObject parseObject(const QVariant &v);
QString dump(const QJsonObject &o);
QString codeVersion();
extern const char *const kInfoColumns;  // the columns infoFromRow() reads, in order
RunInfo infoFromRow(const QSqlQuery &q);
} // namespace storedetail

struct RunStore::Impl {
    QString connection;                    // QSqlDatabase connection name, unique per store
    std::unique_ptr<QTemporaryDir> copy;   // read-only open of an old schema: the migrated copy
    bool inTransaction = false;
    bool hasSchema = false;                // false only for an empty file opened read-only
    QSqlDatabase db() const { return QSqlDatabase::database(connection, false); }
};

} // namespace dlion::core
