#include <job_builder.h>
#include <job_spec.h>
#include <strategy_knobs.h>
#include <structured_file.h>

#include <QCryptographicHash>
#include <QJsonArray>
#include <QTemporaryDir>
#include <QtTest>

using namespace dlion;

class TestJobSpec : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void defaultsAreValid();
    void errorsNameTheField_data();
    void errorsNameTheField();
    void knobsOutsideTheSchemaNameTheKnob_data();
    void knobsOutsideTheSchemaNameTheKnob();
    void knobsInTheSchemaAreAccepted();
    void jsonRoundTrip();
    void yamlAndJsonFiles();
    void overridesWinAndWorkersChecked();
    void malformedFilesNameFileAndLine();
    void modelFileFromTheJobFilesFolder();
    void lrScheduleWarmsUpThenDecays();

private:
    QString write(const QString &name, const QByteArray &text)
    {
        const QString path = m_dir.filePath(name);
        QFile f(path);
        f.open(QIODevice::WriteOnly);
        f.write(text);
        return path;
    }
    QTemporaryDir m_dir;
};

void TestJobSpec::defaultsAreValid()
{
    QString error;
    auto spec = protocol::JobSpec::fromJson(QJsonObject{{"budget", QJsonObject{{"seconds", 5}}}}, &error);
    QVERIFY2(spec, qPrintable(error));
    QCOMPARE(spec->strategy, QString("allreduce"));
    QCOMPARE(spec->dirichletAlpha(), 0.0);
}

void TestJobSpec::errorsNameTheField_data()
{
    QTest::addColumn<QJsonObject>("job");
    QTest::addColumn<QString>("field");
    const QJsonObject budget{{"seconds", 5}};
    QTest::newRow("unknown strategy") << QJsonObject{{"strategy", "sgd"}, {"budget", budget}} << "strategy";
    QTest::newRow("batch not number") << QJsonObject{{"batch_size", "big"}, {"budget", budget}} << "batch_size";
    QTest::newRow("batch fractional") << QJsonObject{{"batch_size", 3.5}, {"budget", budget}} << "batch_size";
    QTest::newRow("negative lr") << QJsonObject{{"lr", -1}, {"budget", budget}} << "lr";
    QTest::newRow("bad partition") << QJsonObject{{"partition", "dirichlet:-2"}, {"budget", budget}} << "partition";
    for (const char *schedule : {"step:0:2", "step:10:1.5", "warmup:0", "warmup:-3", "warmup:10:1", "warmup:10+warmup:20",
                                 "warmup:10+", "cosine:100", "step:10:0.5+step:20:0.5"})
        QTest::addRow("schedule %s", schedule) << QJsonObject{{"lr_schedule", schedule}, {"budget", budget}} << "lr_schedule";
    QTest::newRow("typo") << QJsonObject{{"modle", "mlp"}, {"budget", budget}} << "modle";
    QTest::newRow("no budget") << QJsonObject{} << "budget";
    QTest::newRow("budget typo") << QJsonObject{{"budget", QJsonObject{{"secs", 4}}}} << "budget.secs";
    QTest::newRow("accuracy > 1") << QJsonObject{{"budget", QJsonObject{{"target_accuracy", 80}}}} << "budget.target_accuracy";
    QTest::newRow("slowdown < 1") << QJsonObject{{"slowdown", QJsonArray{1, 0.5}}, {"budget", budget}} << "slowdown";
    QTest::newRow("checkpoint not object") << QJsonObject{{"checkpoint", "/tmp"}, {"budget", budget}} << "checkpoint";
    QTest::newRow("checkpoint no dir") << QJsonObject{{"checkpoint", QJsonObject{{"keep", 2}}}, {"budget", budget}} << "checkpoint.dir";
    QTest::newRow("checkpoint keep 0") << QJsonObject{{"checkpoint", QJsonObject{{"dir", "/c"}, {"keep", 0}}}, {"budget", budget}} << "checkpoint.keep";
    QTest::newRow("checkpoint interval") << QJsonObject{{"checkpoint", QJsonObject{{"dir", "/c"}, {"interval_s", -1}}}, {"budget", budget}} << "checkpoint.interval_s";
    QTest::newRow("checkpoint typo") << QJsonObject{{"checkpoint", QJsonObject{{"dir", "/c"}, {"every", 1}}}, {"budget", budget}} << "checkpoint.every";
    QTest::newRow("resume_from number") << QJsonObject{{"resume_from", 3}, {"budget", budget}} << "resume_from";
    QTest::newRow("rank >= world") << QJsonObject{{"rank", 3}, {"world", 2}, {"budget", budget}} << "rank";
    QTest::newRow("worker_data not list") << QJsonObject{{"worker_data", "/d"}, {"budget", budget}} << "worker_data";
    QTest::newRow("worker_data format") << QJsonObject{{"worker_data", QJsonArray{QJsonObject{{"dataset", "parquet"}}}}, {"budget", budget}}
                                        << "worker_data[0].dataset";
    QTest::newRow("worker_data typo") << QJsonObject{{"worker_data", QJsonArray{QJsonObject{{"dir", "/d"}}}}, {"budget", budget}}
                                      << "worker_data[0].dir";
    QTest::newRow("worker_data count") << QJsonObject{{"worker_data", QJsonArray{QJsonObject{}}}, {"world", 2}, {"budget", budget}}
                                       << "worker_data";
    QTest::newRow("test_set") << QJsonObject{{"test_set", "mine"}, {"budget", budget}} << "test_set";
    QTest::newRow("class_names twice") << QJsonObject{{"class_names", QJsonArray{"a", "a"}}, {"budget", budget}} << "class_names";
}

void TestJobSpec::errorsNameTheField()
{
    QFETCH(QJsonObject, job);
    QFETCH(QString, field);
    QString error;
    QVERIFY(!protocol::JobSpec::fromJson(job, &error));
    QVERIFY2(error.contains("\"" + field + "\""), qPrintable(error));
}

void TestJobSpec::knobsOutsideTheSchemaNameTheKnob_data()
{
    // Every knob of every strategy, from the schema: a value of the wrong
    // type, one past each end of its range, and a name another strategy
    // has but this one does not.
    QTest::addColumn<QString>("strategy");
    QTest::addColumn<QJsonObject>("options");
    QTest::addColumn<QString>("knob");
    for (const protocol::StrategyInfo &s : protocol::strategies()) {
        const auto row = [&](const protocol::Knob &k, const char *what, const QJsonValue &v) {
            QTest::addRow("%s.%s %s", qPrintable(s.name), qPrintable(k.name), what)
                << s.name << QJsonObject{{k.name, v}} << k.name;
        };
        for (const protocol::Knob &k : s.knobs) {
            const bool isFlag = k.type == protocol::Knob::Type::Flag;
            row(k, "wrong type", isFlag ? QJsonValue("yes") : QJsonValue(true));
            if (k.type == protocol::Knob::Type::Integer || k.type == protocol::Knob::Type::Number) {
                row(k, "below range", k.lo - 1);
                row(k, "above range", k.hi + 1);
            }
            if (k.type == protocol::Knob::Type::Integer)
                row(k, "fractional", k.lo + 0.5);
            if (k.type == protocol::Knob::Type::Choice)
                row(k, "no choice", "none-of-these");
        }
        for (const protocol::StrategyInfo &other : protocol::strategies()) {
            for (const protocol::Knob &k : other.knobs) {
                if (!protocol::findKnob(s.name, k.name))
                    row(k, qPrintable("unknown (from " + other.name + ")"), k.defaultValue.isNull() ? 1 : k.defaultValue);
            }
        }
    }
}

void TestJobSpec::knobsOutsideTheSchemaNameTheKnob()
{
    QFETCH(QString, strategy);
    QFETCH(QJsonObject, options);
    QFETCH(QString, knob);
    const QJsonObject job{{"strategy", strategy}, {"strategy_options", options}, {"budget", QJsonObject{{"seconds", 5}}}};
    QString error;
    QVERIFY(!protocol::JobSpec::fromJson(job, &error));
    QVERIFY2(error.contains("\"strategy_options." + knob + "\""), qPrintable(error));
}

void TestJobSpec::knobsInTheSchemaAreAccepted()
{
    // Each knob at both ends of its range (or each of its values) passes.
    for (const protocol::StrategyInfo &s : protocol::strategies()) {
        for (const protocol::Knob &k : s.knobs) {
            QList<QJsonValue> values;
            if (k.type == protocol::Knob::Type::Flag)
                values = {true, false};
            for (const protocol::KnobChoice &c : k.choices)
                values.append(c.value);
            if (k.type == protocol::Knob::Type::Integer || k.type == protocol::Knob::Type::Number)
                values = {k.lo, k.hi};
            QVERIFY(!values.isEmpty());
            for (const QJsonValue &v : std::as_const(values)) {
                const QJsonObject job{{"strategy", s.name}, {"strategy_options", QJsonObject{{k.name, v}}},
                                      {"budget", QJsonObject{{"seconds", 5}}}};
                QString error;
                const auto spec = protocol::JobSpec::fromJson(job, &error);
                QVERIFY2(spec, qPrintable(error));
                QCOMPARE(protocol::knobValue(s.name, spec->strategyOptions, k.name), v);
            }
        }
    }
}

void TestJobSpec::jsonRoundTrip()
{
    protocol::JobSpec s;
    s.strategy = "allreduce";
    s.partition = "dirichlet:0.3";
    s.slowdown = {1, 2, 4};
    s.budget.targetAccuracy = 0.85;
    s.world = 3;
    s.rank = 2;
    s.verifyReplicas = true;
    s.checkpoint = {"/var/ckpt", 1.5, 4};
    s.resumeFrom = "/var/old";
    s.workerData = {{"csv", "/a"}, {"", "/b"}, {"npy", ""}};
    s.testSet = "shared";
    s.classNames = {"cat", "dog"};
    QString error;
    auto back = protocol::JobSpec::fromJson(s.toJson(), &error);
    QVERIFY2(back, qPrintable(error));
    QCOMPARE(back->toJson(), s.toJson());
    QCOMPARE(back->dirichletAlpha(), 0.3);
    QCOMPARE(back->slowdownFor(2), 4.0);
    QCOMPARE(back->slowdownFor(7), 1.0);
    QCOMPARE(back->checkpoint.dir, QString("/var/ckpt"));
    QCOMPARE(back->checkpoint.intervalS, 1.5);
    QCOMPARE(back->checkpoint.keep, 4);
    QCOMPARE(back->resumeFrom, QString("/var/old"));
    QCOMPARE(back->dataFor(0).dataset, QString("csv"));
    QCOMPARE(back->dataFor(1).dataset, s.dataset);
    QCOMPARE(back->dataFor(1).dataDir, QString("/b"));
    QCOMPARE(back->dataFor(2).dataDir, QString());  // another format does not take the job's folder
    QCOMPARE(back->testSet, QString("shared"));
    QCOMPARE(back->classNames, (QStringList{"cat", "dog"}));
    // Without a directory checkpoints are off and absent from the JSON.
    QVERIFY(!protocol::JobSpec().toJson().contains("checkpoint"));
}

void TestJobSpec::yamlAndJsonFiles()
{
    QString error;
    const QString yaml = write("job.yaml", "strategy: allreduce\nmodel: mlp\nworkers: 3\n"
                                            "slowdown: [1, 2, 4]\nbudget:\n  seconds: 9\n"
                                            "checkpoint:\n  dir: /c\n  interval_s: 2\nresume_from: /old\n");
    auto req = core::buildJob(yaml, {}, &error);
    QVERIFY2(req, qPrintable(error));
    QCOMPARE(req->workers, 3);
    QCOMPARE(req->spec.model, QString("mlp"));
    QCOMPARE(req->spec.budget.seconds, 9.0);
    QCOMPARE(req->spec.slowdown, (QList<double>{1, 2, 4}));
    QCOMPARE(req->spec.checkpoint.dir, QString("/c"));
    QCOMPARE(req->spec.checkpoint.intervalS, 2.0);
    QCOMPARE(req->spec.checkpoint.keep, 3);
    QCOMPARE(req->spec.resumeFrom, QString("/old"));

    const QString json = write("job.json", R"({"model": "lenet5", "budget": {"max_rounds": 10}})");
    req = core::buildJob(json, {}, &error);
    QVERIFY2(req, qPrintable(error));
    QCOMPARE(req->spec.budget.maxRounds, 10);
}

void TestJobSpec::overridesWinAndWorkersChecked()
{
    QString error;
    const QString yaml = write("o.yaml", "model: mlp\nbudget:\n  seconds: 9\n");
    auto req = core::buildJob(yaml, QJsonObject{{"model", "lenet5"}, {"budget.seconds", 3}, {"workers", 2}}, &error);
    QVERIFY2(req, qPrintable(error));
    QCOMPARE(req->spec.model, QString("lenet5"));
    QCOMPARE(req->spec.budget.seconds, 3.0);
    QCOMPARE(req->spec.world, 2);
    QVERIFY(!core::buildJob({}, QJsonObject{{"workers", 0}}, &error));
    QVERIFY(error.contains("workers"));
    QVERIFY(!core::buildJob({}, QJsonObject{{"workers", 3}, {"slowdown", QJsonArray{1, 2}}}, &error));
    QVERIFY(error.contains("slowdown"));
    const QJsonArray twoDirs{QJsonObject{{"data_dir", "/a"}}, QJsonObject{{"data_dir", "/b"}}};
    QVERIFY(!core::buildJob({}, QJsonObject{{"workers", 3}, {"worker_data", twoDirs}}, &error));
    QVERIFY2(error.contains("\"worker_data\" lists 2 data folders for 3 workers"), qPrintable(error));
    QVERIFY2(core::buildJob({}, QJsonObject{{"workers", 2}, {"worker_data", twoDirs}}, &error), qPrintable(error));
}

void TestJobSpec::malformedFilesNameFileAndLine()
{
    QString error;
    const QString json = write("bad.json", "{\n  \"model\": \"mlp\",\n  oops\n}");
    QVERIFY(!core::readStructuredFile(json, &error));
    QVERIFY2(error.contains("bad.json:3"), qPrintable(error));
    const QString yaml = write("bad.yaml", "model: mlp\nbudget: [1,\n");
    QVERIFY(!core::readStructuredFile(yaml, &error));
    QVERIFY2(error.contains("bad.yaml:"), qPrintable(error));
    const QString list = write("list.yaml", "- 1\n- 2\n");
    QVERIFY(!core::readStructuredFile(list, &error));
    QVERIFY2(error.contains("top level"), qPrintable(error));
    QVERIFY(!core::readStructuredFile(m_dir.filePath("missing.yaml"), &error));
    QVERIFY2(error.contains("missing.yaml"), qPrintable(error));
}

void TestJobSpec::modelFileFromTheJobFilesFolder()
{
    // torch.jit.save writes a zip archive; its first bytes are all dlion run checks.
    const QString model = write("net.pt", QByteArray("PK\x03\x04", 4) + "rest of the archive");
    QString error;
    auto req = core::buildJob(write("user.yaml", "model: net.pt\n"), {}, &error);
    QVERIFY2(req, qPrintable(error));
    QCOMPARE(req->spec.model, model);
    // Its SHA-256 travels with the job; a model_sha256 the job gives must match.
    const QString sha = QCryptographicHash::hash(QByteArray("PK\x03\x04", 4) + "rest of the archive", QCryptographicHash::Sha256).toHex();
    QCOMPARE(req->spec.modelSha256, sha);
    QCOMPARE(protocol::JobSpec::fromJson(req->spec.toJson(), &error)->modelSha256, sha);
    const QString other(64, 'a');
    QVERIFY(!core::buildJob({}, QJsonObject{{"model", model}, {"model_sha256", other}}, &error));
    QVERIFY2(error.contains(model + ": its SHA-256 is " + sha + ", not the job's model_sha256 " + other), qPrintable(error));
    QVERIFY(!core::buildJob({}, QJsonObject{{"model", model}, {"model_sha256", "ABC"}}, &error));
    QVERIFY2(error.contains("field \"model_sha256\" is \"ABC\"") && error.contains("64 lowercase hex"), qPrintable(error));
    QVERIFY(!core::buildJob({}, QJsonObject{{"model", "mlp"}, {"model_sha256", other}}, &error));
    QVERIFY2(error.contains("model \"mlp\" is not a TorchScript file"), qPrintable(error));
    // A bad name fails with the field, a missing or non-module file with its path.
    QVERIFY(!core::buildJob({}, QJsonObject{{"model", "resnet"}}, &error));
    QVERIFY2(error.contains("field \"model\" is \"resnet\"") && error.contains("TorchScript file PATH.pt"), qPrintable(error));
    QVERIFY(!core::buildJob(write("missing.yaml", "model: gone.pt\n"), {}, &error));
    QVERIFY2(error.contains(m_dir.filePath("gone.pt") + ": cannot read it"), qPrintable(error));
    const QString text = write("text.pt", "not a model");
    QVERIFY(!core::buildJob({}, QJsonObject{{"model", text}}, &error));
    QVERIFY2(error.contains(text + ": not a TorchScript module"), qPrintable(error));
}

void TestJobSpec::lrScheduleWarmsUpThenDecays()
{
    const auto factor = [](const char *text, qint64 round) {
        const std::optional<protocol::LrSchedule> s = protocol::LrSchedule::parse(text);
        return s ? s->factor(round) : -1.0;
    };
    QCOMPARE(factor("constant", 0), 1.0);
    QCOMPARE(factor("constant", 100000), 1.0);
    // Linear from lr/ROUNDS at the first step to lr at step ROUNDS - 1.
    QCOMPARE(factor("warmup:100", 0), 0.01);
    QCOMPARE(factor("warmup:100", 49), 0.5);
    QCOMPARE(factor("warmup:100", 99), 1.0);
    QCOMPARE(factor("warmup:100", 5000), 1.0);
    QCOMPARE(factor("step:10:0.5", 9), 1.0);
    QCOMPARE(factor("step:10:0.5", 10), 0.5);
    QCOMPARE(factor("step:10:0.5", 25), 0.25);
    // Either order; the decay counts from step 0, not from the warm-up's end.
    QCOMPARE(factor("warmup:4+step:10:0.5", 1), 0.5);
    QCOMPARE(factor("step:10:0.5+warmup:4", 1), 0.5);
    QCOMPARE(factor("warmup:20+step:10:0.5", 14), 0.75 * 0.5);
}

QTEST_GUILESS_MAIN(TestJobSpec)
#include "tst_job_spec.moc"
