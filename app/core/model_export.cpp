#include "model_export.h"

#include "run_store.h"

#include <frame_codec.h>
#include <safe_file.h>

#include <QCryptographicHash>
#include <QDir>

namespace dlion::core {

namespace {
const QString kTorchScript = QStringLiteral("torchscript");
const QString kStateDict = QStringLiteral("state_dict");
} // namespace

QString keepFinalModel(const RunData &data, const QString &dir, QString *error)
{
    if (data.finalModel().isEmpty())
        return {};
    // Runs recorded before built-in models came back as TorchScript sent
    // their state_dict as the model (format "state_dict").
    const QString path = QDir(dir).absoluteFilePath(finalModelFileName(data.finalModelInfo().value("format").toString()));
    if (!files::writeAtomically(path, data.finalModel(), error))
        return {};
    if (!data.finalStateDict().isEmpty()
        && !files::writeAtomically(QDir(dir).absoluteFilePath(finalModelFileName(kStateDict)), data.finalStateDict(), error))
        return {};
    return path;
}

bool exportFinalModel(const StoredRun &run, ModelFile which, const QString &to, QString *error)
{
    const QCborMap info = run.data.finalModelInfo();
    if (info.isEmpty()) {
        *error = QStringLiteral("run %1 kept no final model (it failed, or ran before models were kept)").arg(run.info.id);
        return false;
    }
    const QString format = info.value("format").toString();
    QString want = info.value("sha256").toString();
    if (which == ModelFile::TorchScript && format != kTorchScript) {
        *error = QStringLiteral("run %1 kept its model only as a state_dict (it ran before built-in models came back as "
                                "TorchScript); export the state_dict instead (dlion export --state-dict)")
                     .arg(run.info.id);
        return false;
    }
    if (which == ModelFile::StateDict && format == kTorchScript) {
        want = info.value("state_dict_sha256").toString();
        if (want.isEmpty()) {
            *error = QStringLiteral("run %1 trained a TorchScript model of its own, which has no separate state_dict; "
                                    "export the TorchScript module (torch.jit.load; its state_dict() is the state)")
                         .arg(run.info.id);
            return false;
        }
    }
    const QString from = QDir(run.info.outDir).filePath(finalModelFileName(which == ModelFile::TorchScript ? kTorchScript : kStateDict));
    // A kept model is at most what the control plane carried.
    const auto bytes = files::readRegular(from, protocol::FrameCodec::kDefaultMaxMessage, error);
    if (!bytes)
        return false;
    if (QCryptographicHash::hash(*bytes, QCryptographicHash::Sha256).toHex() != want.toLatin1()) {
        *error = QStringLiteral("%1 is not the model run %2 ended with (its SHA-256 differs from the recorded %3)")
                     .arg(from).arg(run.info.id).arg(want);
        return false;
    }
    return files::writeAtomically(to, *bytes, error);
}

} // namespace dlion::core
