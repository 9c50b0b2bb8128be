#include "model_export.h"

#include "run_store.h"

#include <safe_file.h>

#include <QCryptographicHash>
#include <QDir>

namespace dlion::core {

namespace {
// What the control plane carries at most (FrameCodec::kDefaultMaxMessage).
constexpr qint64 kMaxModelBytes = qint64(1) << 30;
} // namespace

QString keepFinalModel(const RunData &data, const QString &dir, QString *error)
{
    if (data.finalModel().isEmpty())
        return {};
    const QString path = QDir(dir).absoluteFilePath(finalModelFileName(data.finalModelInfo().value("format").toString()));
    return files::writeAtomically(path, data.finalModel(), error) ? path : QString();
}

bool exportFinalModel(const StoredRun &run, const QString &to, QString *error)
{
    const QCborMap info = run.data.finalModelInfo();
    if (info.isEmpty()) {
        *error = QStringLiteral("run %1 kept no final model (it failed, or ran before models were kept)").arg(run.info.id);
        return false;
    }
    const QString from = QDir(run.info.outDir).filePath(finalModelFileName(info.value("format").toString()));
    const auto bytes = files::readRegular(from, kMaxModelBytes, error);
    if (!bytes)
        return false;
    const QString want = info.value("sha256").toString();
    if (QCryptographicHash::hash(*bytes, QCryptographicHash::Sha256).toHex() != want.toLatin1()) {
        *error = QStringLiteral("%1 is not the model run %2 ended with (its SHA-256 differs from the recorded %3)")
                     .arg(from).arg(run.info.id).arg(want);
        return false;
    }
    return files::writeAtomically(to, *bytes, error);
}

} // namespace dlion::core
