#include "export_command.h"

#include "store_access.h"

#include <local_cluster.h>
#include <model_export.h>

#include <QProcess>

namespace dlion::cli {

namespace {

// The torch work is the agent's (this CLI links no LibTorch): dlion-agent
// --export-checkpoint loads the checkpoint into its model and writes it.
int exportCheckpoint(const QCommandLineParser &parser)
{
    const QString agent = core::LocalCluster::agentProgram();
    if (agent.isEmpty()) {
        stdErr() << "dlion export: dlion-agent was not found next to dlion or on PATH; set DLION_AGENT\n";
        return 1;
    }
    QProcess p;
    p.setProcessChannelMode(QProcess::ForwardedChannels);
    QStringList args{"--export-checkpoint", parser.value("checkpoint"), "--dataset", parser.value("dataset"), "--data-dir",
                     parser.value("data-dir"), "--output", parser.value("output")};
    if (parser.isSet("state-dict"))
        args << "--state-dict";
    p.start(agent, args);
    constexpr int kTimeoutMs = 300000;  // loads the dataset for the input shape
    if (!p.waitForFinished(kTimeoutMs) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
        p.kill();
        stdErr() << "dlion export: the checkpoint was not exported (see above)\n";
        return 1;
    }
    stdOut() << "wrote " << parser.value("output") << "\n";
    return 0;
}

} // namespace

int exportCommand(const QStringList &args)
{
    const cmdline::Page page{
        QStringLiteral("dlion export"), QStringLiteral("write a recorded run's trained model for Python"),
        QStringLiteral("dlion export RUN [--state-dict] -o FILE\n"
                       "dlion export --checkpoint FILE [--dataset NAME] [--data-dir DIR] [--state-dict] -o FILE"),
        QStringLiteral(
            "Writes the model a run ended with (RUN: a run id from 'dlion runs', or 'last'), checked against\n"
            "the SHA-256 the run recorded. Every strategy keeps the average of the replicas' parameters and\n"
            "buffers, the model the run's final consensus accuracy scores. The file is TorchScript\n"
            "(torch.jit.load), for a built-in model (mlp, lenet5, cnn) as for a model of your own\n"
            "(model: FILE.pt). --state-dict writes a built-in model's state_dict instead (torch.load), its\n"
            "keys the parameter and buffer names of the TorchScript module's state_dict(). --checkpoint\n"
            "writes a checkpoint's model the same way; the dataset it was trained on gives the model its\n"
            "input shape."),
        {QStringLiteral("dlion export last -o model.pt"),
         QStringLiteral("dlion export last --state-dict -o model_state_dict.pt"),
         QStringLiteral("dlion export --checkpoint ckpt/worker-0-round-000000000120.ckpt -o model.pt"),
         QStringLiteral("python3 -c \"import torch; m = torch.jit.load('model.pt')\"")},
        QStringLiteral("0 success, 1 failure (store, files), 2 bad usage or unknown run id.")};
    QCommandLineParser parser;
    addStoreOption(parser);
    parser.addOption({{"o", "output"}, "The file to write.", "FILE"});
    parser.addOption({"checkpoint", "Export this checkpoint file's model instead of a run's.", "FILE"});
    parser.addOption({"dataset", "With --checkpoint: the dataset it was trained on.", "NAME", "fashion-mnist"});
    parser.addOption({"data-dir", "With --checkpoint: the dataset's folder (default: its package's).", "DIR"});
    parser.addOption({"state-dict", "Write a built-in model's state_dict (torch.load) instead of TorchScript."});
    parser.addPositionalArgument("RUN", "Run id (see 'dlion runs'), or 'last'.");
    int code = 0;
    if (!cmdline::parse(page, parser, args, &code))
        return code;
    const QStringList pos = parser.positionalArguments();
    if (pos.size() != (parser.isSet("checkpoint") ? 0 : 1) || parser.value("output").isEmpty()) {
        stdErr() << "dlion export: give one run id, or --checkpoint FILE, and -o FILE (dlion export last -o model.pt)\n";
        return 2;
    }
    if (parser.isSet("checkpoint"))
        return exportCheckpoint(parser);
    core::RunStore store;
    if (!openStore(QStringLiteral("export"), parser, core::RunStore::Mode::ReadOnly, store, &code))
        return code;
    const auto id = resolveRun(QStringLiteral("export"), store, pos[0], &code);
    if (!id)
        return code;
    const auto run = store.loadRun(*id);
    QString error = run ? QString() : store.errorString();
    const bool stateDict = parser.isSet("state-dict");
    if (!run
        || !core::exportFinalModel(*run, stateDict ? core::ModelFile::StateDict : core::ModelFile::TorchScript,
                                   parser.value("output"), &error)) {
        stdErr() << "dlion export: " << error << "\n";
        return 1;
    }
    // A run recorded before built-in models came back as TorchScript has
    // only the state_dict, under "sha256".
    const QCborMap info = run->data.finalModelInfo();
    const QString hash = info.value(QStringLiteral("state_dict_sha256")).toString();
    stdOut() << "wrote " << parser.value("output") << " (" << (stateDict ? "state_dict" : "torchscript") << ", sha256 "
             << (stateDict && !hash.isEmpty() ? hash : info.value(QStringLiteral("sha256")).toString()) << ")\n";
    return 0;
}

} // namespace dlion::cli
