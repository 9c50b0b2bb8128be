#pragma once

// PyTorch on the Python side, for tests that export a model from Python or
// load back what DLion exports. Tests QSKIP where Python has no torch.
#include <QProcess>
#include <QString>
#include <QStringList>

#include <optional>

namespace dlion::test {

// The Python with torch: /usr/bin/python3 (Debian's python3-torch), or
// empty when it lacks torch.
inline QString pythonWithTorch()
{
    static const QString python = [] {
        QProcess p;
        p.start(QStringLiteral("/usr/bin/python3"), {QStringLiteral("-c"), QStringLiteral("import torch")});
        return p.waitForFinished(60000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0
            ? QStringLiteral("/usr/bin/python3")
            : QString();
    }();
    return python;
}

// A script of examples/torchscript.
inline QString torchscriptExample(const QString &name)
{
    return QStringLiteral(DLION_EXAMPLES_DIR "/torchscript/") + name;
}

// Runs pythonWithTorch() on `args`; returns its stdout, or nullopt with its
// stderr in *error when it fails or runs over two minutes.
inline std::optional<QByteArray> runPython(const QStringList &args, QString *error)
{
    QProcess p;
    p.start(pythonWithTorch(), args);
    const bool finished = p.waitForFinished(120000);
    if (!finished || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
        p.kill();
        *error = QString::fromLocal8Bit(p.readAllStandardError());
        return std::nullopt;
    }
    return p.readAllStandardOutput();
}

// examples/torchscript/export_model.py's small CNN (BatchNorm, 8 and 16
// channels) as DIR/small_cnn.pt; `options` such as {"--channels", "3"}.
// Returns the path, or an empty string with the reason in *error.
inline QString exportExampleModel(const QString &dir, const QStringList &options, QString *error)
{
    const QString path = dir + QStringLiteral("/small_cnn.pt");
    return runPython(QStringList{torchscriptExample(QStringLiteral("export_model.py")), path} + options, error) ? path
                                                                                                            : QString();
}

} // namespace dlion::test
