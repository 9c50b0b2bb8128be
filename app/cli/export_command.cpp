#include "export_command.h"

#include "store_access.h"

#include <model_export.h>

namespace dlion::cli {

int exportCommand(const QStringList &args)
{
    const cmdline::Page page{
        QStringLiteral("dlion export"), QStringLiteral("write a recorded run's trained model for Python"),
        QStringLiteral("dlion export RUN -o FILE"),
        QStringLiteral(
            "Writes the model a run ended with (RUN: a run id from 'dlion runs', or 'last'), checked against\n"
            "the SHA-256 the run recorded. Every strategy keeps the average of the replicas' parameters and\n"
            "buffers, the model the run's final consensus accuracy scores. A TorchScript model (model: FILE.pt)\n"
            "comes back as TorchScript (torch.jit.load); a built-in model (mlp, lenet5, cnn) as a state_dict\n"
            "(torch.load)."),
        {QStringLiteral("dlion export last -o model.pt"),
         QStringLiteral("python3 -c \"import torch; m = torch.jit.load('model.pt')\"")},
        QStringLiteral("0 success, 1 failure (store, files), 2 bad usage or unknown run id.")};
    QCommandLineParser parser;
    addStoreOption(parser);
    parser.addOption({{"o", "output"}, "The file to write.", "FILE"});
    parser.addPositionalArgument("RUN", "Run id (see 'dlion runs'), or 'last'.");
    int code = 0;
    if (!cmdline::parse(page, parser, args, &code))
        return code;
    const QStringList pos = parser.positionalArguments();
    if (pos.size() != 1 || parser.value("output").isEmpty()) {
        stdErr() << "dlion export: give one run id and -o FILE (dlion export last -o model.pt)\n";
        return 2;
    }
    core::RunStore store;
    if (!openStore(QStringLiteral("export"), parser, core::RunStore::Mode::ReadOnly, store, &code))
        return code;
    const auto id = resolveRun(QStringLiteral("export"), store, pos[0], &code);
    if (!id)
        return code;
    const auto run = store.loadRun(*id);
    QString error = run ? QString() : store.errorString();
    if (!run || !core::exportFinalModel(*run, parser.value("output"), &error)) {
        stdErr() << "dlion export: " << error << "\n";
        return 1;
    }
    stdOut() << "wrote " << parser.value("output") << " (" << run->data.finalModelInfo().value("format").toString()
             << ", sha256 " << run->data.finalModelInfo().value("sha256").toString() << ")\n";
    return 0;
}

} // namespace dlion::cli
