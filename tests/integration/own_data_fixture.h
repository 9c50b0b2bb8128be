#pragma once

// Workers that each train on their own data folder: writes the folders and
// checks what a finished run reports about them.
#include <run_store.h>

#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>
#include <QtTest>

namespace dlion::test {

// One worker's CSV data: `rows[c]` training rows of class c, in class order,
// and a test split of two rows per class it holds. Class c's feature sits
// near c, so an MLP separates them within a few rounds.
struct OwnCsvData {
    QList<int> rows;

    void write(const QString &dir) const
    {
        QVERIFY(QDir().mkpath(dir));
        writeSplit(dir + "/train.csv", rows);
        QList<int> test;
        for (int n : rows)
            test.append(n > 0 ? 2 : 0);
        writeSplit(dir + "/test.csv", test);
    }

    // What the worker trains on: the last tenth of its rows is held out.
    QList<qint64> trainedHistogram() const
    {
        QList<qint64> out;
        int total = 0;
        for (int n : rows)
            total += n;
        int left = total - std::min(1000, total / 10);
        for (int n : rows) {
            out.append(std::min(n, left));
            left -= int(out.last());
        }
        return out;
    }

private:
    static void writeSplit(const QString &path, const QList<int> &perClass)
    {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("x,y,label\n");
        for (int c = 0; c < perClass.size(); ++c) {
            for (int i = 0; i < perClass[c]; ++i)
                f.write(QStringLiteral("%1,%2,%3\n").arg(c + 0.01 * (i % 7)).arg(-c).arg(c).toUtf8());
        }
    }
};

// A job file naming the classes, so workers holding different ones build
// one model.
inline QString writeClassNamesJob(const QString &dir, int classes)
{
    QJsonArray names;
    for (int c = 0; c < classes; ++c)
        names.append(QStringLiteral("class-%1").arg(c));
    const QString path = dir + "/own-data-job.json";
    QFile f(path);
    if (f.open(QIODevice::WriteOnly))
        f.write(QJsonDocument(QJsonObject{{"class_names", names}, {"model", "mlp"}, {"dataset", "csv"}}).toJson());
    return path;
}

// Runs `dlion run ARGS` to the end; false (with the output) on failure.
inline bool runCli(const QStringList &args, int timeoutMs, QString *output)
{
    QProcess p;
    p.start(qEnvironmentVariable("DLION_CLI"), args);
    const bool ended = p.waitForFinished(timeoutMs);
    *output = QString::fromUtf8(p.readAllStandardOutput() + p.readAllStandardError());
    return ended && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
}

// Each worker's histogram, samples and folder in summary.json and in the
// run store's record of run 1.
inline void expectOwnData(const QString &runDir, const QString &store, const QList<OwnCsvData> &data,
                          const QStringList &dirs)
{
    QFile f(runDir + "/summary.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonArray perWorker = QJsonDocument::fromJson(f.readAll()).object().value("per_worker").toArray();
    QCOMPARE(perWorker.size(), data.size());
    core::RunStore s;
    QVERIFY2(s.open(store, core::RunStore::Mode::ReadOnly), qPrintable(s.errorString()));
    const auto run = s.loadRun(1);
    QVERIFY2(run, qPrintable(s.errorString()));
    for (int w = 0; w < data.size(); ++w) {
        QList<qint64> expected = data[w].trainedHistogram();
        QJsonArray histogram;
        for (qint64 n : expected)
            histogram.append(n);
        const QJsonObject summary = perWorker[w].toObject().value("data").toObject();
        QCOMPARE(summary.value("histogram").toArray(), histogram);
        QCOMPARE(summary.value("data_dir").toString(), dirs[w]);
        const auto &stored = run->data.dataSummary(w);
        QVERIFY2(stored, qPrintable(QStringLiteral("worker %1 has no stored data summary").arg(w)));
        QCOMPARE(stored->histogram, expected);
        QCOMPARE(stored->dataDir, dirs[w]);
        QCOMPARE(stored->dataset, QStringLiteral("csv"));
        qint64 samples = 0;
        for (qint64 n : expected)
            samples += n;
        QCOMPARE(stored->samples, samples);
    }
}

} // namespace dlion::test
