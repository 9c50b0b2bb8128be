#include "job_editor.h"

#include "field_marker.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QStackedWidget>
#include <QVBoxLayout>

#include <cmath>
#include <limits>

namespace dlion::ui {

namespace {

QDoubleSpinBox *doubleSpin(QWidget *parent, double lo, double hi, double value, int decimals, const QString &suffix)
{
    auto *s = new QDoubleSpinBox(parent);
    s->setRange(lo, hi);
    s->setDecimals(decimals);
    s->setValue(value);
    s->setSuffix(suffix);
    s->setAccelerated(true);
    return s;
}

QSpinBox *intSpin(QWidget *parent, int lo, int hi, int value, const QString &suffix)
{
    auto *s = new QSpinBox(parent);
    s->setRange(lo, hi);
    s->setValue(value);
    s->setSuffix(suffix);
    s->setAccelerated(true);
    return s;
}

QComboBox *combo(QWidget *parent, const QList<std::pair<QString, QString>> &items)
{
    auto *c = new QComboBox(parent);
    for (const auto &[label, key] : items)
        c->addItem(label, key);
    return c;
}

void select(QComboBox *c, const QString &key)
{
    const int i = c->findData(key);
    if (i >= 0)
        c->setCurrentIndex(i);
}

using protocol::Knob;

// A knob with a derived default gets one more value below its range,
// shown as "auto": the engine's default.
double formLowest(const Knob &k) { return k.lo * k.scale - (k.derivedDefault() ? 1 : 0); }

QWidget *knobInput(QWidget *parent, const Knob &k)
{
    const QString lowest = k.derivedDefault() ? JobEditor::tr("auto") : k.lowestText;
    QWidget *input = nullptr;
    switch (k.type) {
    case Knob::Type::Flag:
        input = new QCheckBox(k.label, parent);
        break;
    case Knob::Type::Choice: {
        QList<std::pair<QString, QString>> items;
        for (const protocol::KnobChoice &c : k.choices)
            items.append({c.label, c.value});
        input = combo(parent, items);
        break;
    }
    case Knob::Type::Integer: {
        auto *s = intSpin(parent, int(formLowest(k)), int(std::min<double>(k.hi, std::numeric_limits<int>::max())), 0, k.unit);
        s->setSpecialValueText(lowest);
        input = s;
        break;
    }
    case Knob::Type::Number: {
        auto *d = doubleSpin(parent, formLowest(k), k.hi * k.scale, 0, k.decimals, k.unit);
        d->setSingleStep(std::min(1.0, (k.hi - k.lo) * k.scale / 20));
        d->setSpecialValueText(lowest);
        input = d;
        break;
    }
    }
    input->setToolTip(k.help);
    return input;
}

// Shows `v`, or the knob's default when `v` is undefined.
void setKnobInput(const Knob &k, QWidget *input, const QJsonValue &v)
{
    const QJsonValue value = v.isUndefined() ? k.defaultValue : v;
    if (auto *c = qobject_cast<QCheckBox *>(input))
        c->setChecked(value.toBool());
    else if (auto *c = qobject_cast<QComboBox *>(input))
        select(c, value.toString());
    else if (auto *s = qobject_cast<QSpinBox *>(input))
        s->setValue(value.isNull() ? s->minimum() : value.toInt());
    else if (auto *d = qobject_cast<QDoubleSpinBox *>(input))
        d->setValue(value.isNull() ? d->minimum() : value.toDouble() * k.scale);
}

// The knob's value for the job: undefined at its default, so a job holds
// only the knobs the user changed.
QJsonValue knobInputValue(const Knob &k, const QWidget *input)
{
    QJsonValue v;
    if (auto *c = qobject_cast<const QCheckBox *>(input))
        v = c->isChecked();
    else if (auto *c = qobject_cast<const QComboBox *>(input))
        v = c->currentData().toString();
    else if (auto *s = qobject_cast<const QSpinBox *>(input))
        v = s->value() == s->minimum() && k.derivedDefault() ? QJsonValue() : QJsonValue(s->value());
    else if (auto *d = qobject_cast<const QDoubleSpinBox *>(input))
        v = d->value() == d->minimum() && k.derivedDefault() ? QJsonValue() : QJsonValue(d->value() / k.scale);
    const bool atDefault = v.isNull()
        || (!k.derivedDefault()
            && (v.isDouble() ? std::abs(v.toDouble() - k.defaultValue.toDouble()) < 1e-12 : v == k.defaultValue));
    return atDefault ? QJsonValue(QJsonValue::Undefined) : v;
}

} // namespace

JobEditor::JobEditor(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(12);
    auto *left = new QVBoxLayout;
    left->addWidget(buildDataGroup());
    left->addWidget(buildBudgetGroup());
    left->addWidget(buildCheckpointGroup());
    left->addStretch(1);
    layout->addLayout(left, 1);
    layout->addWidget(buildStrategyGroup(), 1);

    m_fields = {{"dataset", m_dataset},         {"data_dir", m_dataDir},
                {"worker_data", m_workerDirs},  {"test_set", m_testSet},
                {"class_names", m_classNames},
                {"partition", m_alpha},         {"model", m_model},
                {"strategy", m_strategy},       {"batch_size", m_batch},
                {"lr", m_lr},                   {"lr_schedule", m_lrSchedule},
                {"seed", m_seed},
                {"eval_interval_s", m_evalInterval}, {"eval_samples", m_evalSamples},
                {"budget.seconds", m_seconds},
                {"budget.epochs", m_epochs},    {"budget.target_accuracy", m_target},
                {"budget.max_rounds", m_maxRounds},
                {"checkpoint.dir", m_checkpointDir}, {"checkpoint.interval_s", m_checkpointInterval},
                {"checkpoint.keep", m_checkpointKeep}, {"resume_from", m_resumeFrom}};
    for (auto it = m_fields.cbegin(); it != m_fields.cend(); ++it) {
        it.value()->setObjectName(it.key());
        watch(it.value());
    }
    watch(m_partition);
}

void JobEditor::watch(QWidget *w)
{
    if (auto *c = qobject_cast<QComboBox *>(w))
        connect(c, &QComboBox::currentIndexChanged, this, &JobEditor::changed);
    else if (auto *s = qobject_cast<QSpinBox *>(w))
        connect(s, &QSpinBox::valueChanged, this, &JobEditor::changed);
    else if (auto *d = qobject_cast<QDoubleSpinBox *>(w))
        connect(d, &QDoubleSpinBox::valueChanged, this, &JobEditor::changed);
    else if (auto *e = qobject_cast<QLineEdit *>(w))
        connect(e, &QLineEdit::textChanged, this, &JobEditor::changed);
    else if (auto *b = qobject_cast<QCheckBox *>(w))
        connect(b, &QCheckBox::toggled, this, &JobEditor::changed);
}

QWidget *JobEditor::buildDataGroup()
{
    auto *box = new QGroupBox(tr("Data and model"), this);
    m_dataset = combo(box, {{tr("Fashion-MNIST"), "fashion-mnist"}, {tr("MNIST"), "mnist"},
                            {tr("CIFAR-10"), "cifar10"}, {tr("Synthetic (generated)"), "synthetic"},
                            {tr("Shapes, 32×32 RGB (generated)"), "shapes"},
                            {tr("Image folder (class/*.png, jpg)"), "imagefolder"}, {tr("CSV table"), "csv"},
                            {tr("NumPy arrays (.npy)"), "npy"}});
    m_dataset->setToolTip(tr("Training data; each worker trains on its own partition, or on its own folder's data"));
    m_dataDir = new QLineEdit(box);
    m_dataDir->setPlaceholderText(tr("default: /usr/share/datasets/fashion-mnist"));
    m_dataDir->setToolTip(tr("Folder holding the dataset files on every worker"));
    m_workerDirs = new QLineEdit(box);
    m_workerDirs->setPlaceholderText(tr("off: the data folder, partitioned"));
    m_workerDirs->setToolTip(tr("One folder per local worker, separated by commas: each worker trains on all of its "
                                "own folder's data, no partition (hosts of a cluster name theirs on the Machines page)"));
    m_testSet = combo(box, {{tr("each worker's own test split"), "local"},
                            {tr("the data folder's test split (shared)"), "shared"}});
    m_testSet->setToolTip(tr("With per-worker data: which test split every worker is scored on"));
    m_classNames = new QLineEdit(box);
    m_classNames->setPlaceholderText(tr("from the data"));
    m_classNames->setToolTip(tr("Class names in label order, separated by commas: image folders map their class "
                                "folders to them, and workers holding different classes still build one model"));
    m_partition = combo(box, {{tr("IID (shuffled evenly)"), "iid"}, {tr("Dirichlet (non-IID)"), "dirichlet"}});
    m_partition->setToolTip(tr("How samples are split over workers"));
    m_alpha = doubleSpin(box, 0, 100, 0.3, 2, QString());
    m_alpha->setPrefix(tr("α = "));
    m_alpha->setSingleStep(0.1);
    m_alpha->setToolTip(tr("Dirichlet concentration: small α gives each worker few classes (must be above 0)"));
    m_alpha->setEnabled(false);
    connect(m_partition, &QComboBox::currentIndexChanged, this,
            [this] { m_alpha->setEnabled(m_partition->currentData() == QLatin1String("dirichlet")); });
    auto *partition = new QHBoxLayout;
    partition->addWidget(m_partition, 1);
    partition->addWidget(m_alpha);
    m_model = combo(box, {{tr("LeNet-5"), "lenet5"}, {tr("MLP"), "mlp"}, {tr("Small CNN"), "cnn"}});
    m_batch = intSpin(box, 1, 65536, 32, tr(" samples/worker"));
    m_batch->setToolTip(tr("Samples per worker per round (the mean share under weighted dynamic batching)"));
    m_lr = doubleSpin(box, 0, 100, 0.05, 4, QString());
    m_lr->setSingleStep(0.01);
    m_lr->setToolTip(tr("SGD learning rate (must be above 0)"));
    m_lrSchedule = new QLineEdit(box);
    m_lrSchedule->setPlaceholderText(tr("constant"));
    m_lrSchedule->setToolTip(tr("warmup:R raises the learning rate linearly over each replica's first R rounds; "
                                "step:R:G multiplies it by G every R rounds; warmup:R+step:R2:G does both"));
    m_seed = intSpin(box, 0, 1 << 30, 1, QString());
    auto *form = new QFormLayout(box);
    form->addRow(tr("&Dataset:"), m_dataset);
    form->addRow(tr("Data &folder:"), m_dataDir);
    form->addRow(tr("Per-&worker folders:"), m_workerDirs);
    form->addRow(tr("Test s&plit:"), m_testSet);
    form->addRow(tr("&Class names:"), m_classNames);
    auto *partitionLabel = new QLabel(tr("&Partition:"), box);
    partitionLabel->setBuddy(m_partition);
    form->addRow(partitionLabel, partition);
    form->addRow(tr("&Model:"), m_model);
    form->addRow(tr("&Batch:"), m_batch);
    form->addRow(tr("&Learning rate:"), m_lr);
    form->addRow(tr("LR sched&ule:"), m_lrSchedule);
    form->addRow(tr("S&eed:"), m_seed);
    return box;
}

QWidget *JobEditor::buildBudgetGroup()
{
    auto *box = new QGroupBox(tr("Budget (whichever comes first; 0 = no limit)"), this);
    m_seconds = doubleSpin(box, 0, 1e7, 120, 0, tr(" s"));
    m_seconds->setToolTip(tr("Training time budget in seconds"));
    m_epochs = doubleSpin(box, 0, 1e6, 0, 1, tr(" epochs"));
    m_target = doubleSpin(box, 0, 100, 0, 1, tr(" %"));
    m_target->setToolTip(tr("Stop once the test accuracy reaches this"));
    m_maxRounds = intSpin(box, 0, 1 << 30, 0, tr(" rounds"));
    m_evalInterval = doubleSpin(box, 0, 86400, 2, 1, tr(" s"));
    m_evalInterval->setToolTip(tr("Seconds between test evaluations (at least 0.05 s)"));
    m_evalSamples = intSpin(box, 0, 10000000, 10000, tr(" samples"));
    m_evalSamples->setToolTip(tr("Test samples every replica is scored on at each evaluation"));
    auto *form = new QFormLayout(box);
    form->addRow(tr("&Time:"), m_seconds);
    form->addRow(tr("E&pochs:"), m_epochs);
    form->addRow(tr("&Target accuracy:"), m_target);
    form->addRow(tr("Max &rounds:"), m_maxRounds);
    form->addRow(tr("E&valuate every:"), m_evalInterval);
    form->addRow(tr("Test &samples:"), m_evalSamples);
    return box;
}

QWidget *JobEditor::buildCheckpointGroup()
{
    auto *box = new QGroupBox(tr("Checkpoints"), this);
    m_checkpointDir = new QLineEdit(box);
    m_checkpointDir->setPlaceholderText(tr("off"));
    m_checkpointDir->setToolTip(tr("Folder on every worker's machine for periodic checkpoints of its model"));
    m_checkpointInterval = doubleSpin(box, 0.1, 86400, 60, 1, tr(" s"));
    m_checkpointKeep = intSpin(box, 1, 1000, 3, tr(" per worker"));
    m_checkpointKeep->setToolTip(tr("Older checkpoints are deleted once a newer one is safely written"));
    m_resumeFrom = new QLineEdit(box);
    m_resumeFrom->setPlaceholderText(tr("start fresh"));
    m_resumeFrom->setToolTip(tr("A checkpoint folder: the run goes on from its newest checkpoints (round, time and model)"));
    auto *form = new QFormLayout(box);
    form->addRow(tr("&Folder:"), m_checkpointDir);
    form->addRow(tr("Ever&y:"), m_checkpointInterval);
    form->addRow(tr("&Keep:"), m_checkpointKeep);
    form->addRow(tr("Resume &from:"), m_resumeFrom);
    return box;
}

QWidget *JobEditor::buildStrategyGroup()
{
    auto *box = new QGroupBox(tr("Strategy"), this);
    m_strategy = new QComboBox(box);
    m_knobs = new QStackedWidget(box);
    for (const protocol::StrategyInfo &s : protocol::strategies()) {
        m_strategy->addItem(s.title, s.name);
        m_knobs->addWidget(buildKnobPage(s));
    }
    connect(m_strategy, &QComboBox::currentIndexChanged, m_knobs, &QStackedWidget::setCurrentIndex);
    select(m_strategy, QStringLiteral("dlion"));

    auto *layout = new QVBoxLayout(box);
    layout->addWidget(m_strategy);
    layout->addWidget(m_knobs, 1);
    return box;
}

QWidget *JobEditor::buildKnobPage(const protocol::StrategyInfo &strategy)
{
    auto *page = new QWidget(m_knobs);
    auto *form = new QFormLayout(page);
    QList<KnobField> &fields = m_knobFields[strategy.name];
    for (const protocol::Knob &k : strategy.knobs) {
        QWidget *input = knobInput(page, k);
        input->setObjectName(QStringLiteral("strategy_options.") + k.name);
        setKnobInput(k, input, QJsonValue::Undefined);
        watch(input);
        if (k.type == protocol::Knob::Type::Flag)
            form->addRow(input);
        else
            form->addRow(k.label, input);
        fields.append({&k, input});
    }
    // A knob that only matters with a technique on is greyed out while it is off.
    for (const KnobField &f : std::as_const(fields)) {
        if (auto *flag = qobject_cast<QCheckBox *>(knobField(fields, f.knob->needs)))
            connect(flag, &QCheckBox::toggled, f.input, &QWidget::setEnabled);
    }
    return page;
}

QWidget *JobEditor::knobField(const QList<KnobField> &fields, const QString &name)
{
    for (const KnobField &f : fields) {
        if (f.knob->name == name)
            return f.input;
    }
    return nullptr;
}

QString JobEditor::currentStrategy() const { return m_strategy->currentData().toString(); }

QWidget *JobEditor::field(const QString &key) const
{
    static const QString prefix = QStringLiteral("strategy_options.");
    if (!key.startsWith(prefix))
        return m_fields.value(key);
    return knobField(m_knobFields.value(currentStrategy()), key.mid(prefix.size()));
}

QJsonObject JobEditor::strategyOptions() const
{
    QJsonObject options;
    for (const KnobField &f : m_knobFields.value(currentStrategy())) {
        if (const QJsonValue v = knobInputValue(*f.knob, f.input); !v.isUndefined())
            options.insert(f.knob->name, v);
    }
    return options;
}

void JobEditor::setStrategyOptions(const QJsonObject &o)
{
    for (const KnobField &f : m_knobFields.value(currentStrategy()))
        setKnobInput(*f.knob, f.input, o.value(f.knob->name));
}

QJsonObject JobEditor::job() const
{
    QJsonObject j{{"dataset", m_dataset->currentData().toString()},
                  {"model", m_model->currentData().toString()},
                  {"strategy", m_strategy->currentData().toString()},
                  {"batch_size", m_batch->value()},
                  {"lr", m_lr->value()},
                  {"seed", m_seed->value()},
                  {"eval_interval_s", m_evalInterval->value()},
                  {"eval_samples", m_evalSamples->value()},
                  {"budget", QJsonObject{{"seconds", m_seconds->value()},
                                         {"epochs", m_epochs->value()},
                                         {"target_accuracy", m_target->value() / 100.0},
                                         {"max_rounds", m_maxRounds->value()}}},
                  {"strategy_options", strategyOptions()}};
    j.insert("partition", m_partition->currentData() == QLatin1String("iid")
                              ? QStringLiteral("iid")
                              : QStringLiteral("dirichlet:%1").arg(m_alpha->value()));
    if (!m_dataDir->text().trimmed().isEmpty())
        j.insert("data_dir", m_dataDir->text().trimmed());
    if (!m_workerDirs->text().trimmed().isEmpty()) {
        QJsonArray dirs;
        for (const QString &dir : m_workerDirs->text().split(','))
            dirs.append(QJsonObject{{"data_dir", dir.trimmed()}});
        j.insert("worker_data", dirs);
        j.insert("test_set", m_testSet->currentData().toString());
    }
    if (!m_classNames->text().trimmed().isEmpty()) {
        QJsonArray names;
        for (const QString &name : m_classNames->text().split(','))
            names.append(name.trimmed());
        j.insert("class_names", names);
    }
    if (!m_lrSchedule->text().trimmed().isEmpty())
        j.insert("lr_schedule", m_lrSchedule->text().trimmed());
    if (!m_checkpointDir->text().trimmed().isEmpty())
        j.insert("checkpoint", QJsonObject{{"dir", m_checkpointDir->text().trimmed()},
                                           {"interval_s", m_checkpointInterval->value()},
                                           {"keep", m_checkpointKeep->value()}});
    if (!m_resumeFrom->text().trimmed().isEmpty())
        j.insert("resume_from", m_resumeFrom->text().trimmed());
    return j;
}

void JobEditor::setJob(const QJsonObject &j)
{
    if (j.contains("dataset"))
        select(m_dataset, j.value("dataset").toString());
    if (j.contains("model"))
        select(m_model, j.value("model").toString());
    if (j.contains("strategy"))
        select(m_strategy, j.value("strategy").toString());
    if (j.contains("data_dir"))
        m_dataDir->setText(j.value("data_dir").toString());
    QStringList dirs, names;
    for (const QJsonValue &w : j.value("worker_data").toArray())
        dirs.append(w.toObject().value("data_dir").toString());
    for (const QJsonValue &n : j.value("class_names").toArray())
        names.append(n.toString());
    m_workerDirs->setText(dirs.join(QStringLiteral(", ")));
    m_classNames->setText(names.join(QStringLiteral(", ")));
    select(m_testSet, j.value("test_set").toString(QStringLiteral("local")));
    if (j.contains("partition")) {
        const QString p = j.value("partition").toString();
        select(m_partition, p.startsWith(QLatin1String("dirichlet:")) ? QStringLiteral("dirichlet") : QStringLiteral("iid"));
        if (p.startsWith(QLatin1String("dirichlet:")))
            m_alpha->setValue(p.mid(10).toDouble());
    }
    if (j.contains("batch_size"))
        m_batch->setValue(j.value("batch_size").toInt());
    if (j.contains("lr"))
        m_lr->setValue(j.value("lr").toDouble());
    m_lrSchedule->setText(j.value("lr_schedule").toString());
    if (j.contains("seed"))
        m_seed->setValue(j.value("seed").toInt());
    if (j.contains("eval_interval_s"))
        m_evalInterval->setValue(j.value("eval_interval_s").toDouble());
    if (j.contains("eval_samples"))
        m_evalSamples->setValue(j.value("eval_samples").toInt());
    if (j.contains("budget")) {
        const QJsonObject b = j.value("budget").toObject();
        m_seconds->setValue(b.value("seconds").toDouble());
        m_epochs->setValue(b.value("epochs").toDouble());
        m_target->setValue(100.0 * b.value("target_accuracy").toDouble());
        m_maxRounds->setValue(b.value("max_rounds").toInt());
    }
    if (j.contains("strategy_options"))
        setStrategyOptions(j.value("strategy_options").toObject());
    const QJsonObject checkpoint = j.value("checkpoint").toObject();
    m_checkpointDir->setText(checkpoint.value("dir").toString());
    m_checkpointInterval->setValue(checkpoint.value("interval_s").toDouble(60));
    m_checkpointKeep->setValue(checkpoint.value("keep").toInt(3));
    m_resumeFrom->setText(j.value("resume_from").toString());
}

QString JobEditor::validate()
{
    // The inputs keep every knob in its schema range; this rule spans two knobs.
    const auto *dkt = qobject_cast<QCheckBox *>(field(QStringLiteral("strategy_options.dkt")));
    const auto *alpha = qobject_cast<QDoubleSpinBox *>(field(QStringLiteral("strategy_options.dkt_alpha")));
    if (dkt && alpha && dkt->isChecked() && !(alpha->value() > 0)) {
        const QString message = tr("field \"strategy_options.dkt_alpha\" must be above 0 while knowledge transfer is on");
        FieldMarker::mark(field(QStringLiteral("strategy_options.dkt_alpha")), message);
        return message;
    }
    return {};
}

bool JobEditor::markField(const QString &field, const QString &message)
{
    if (field == QLatin1String("budget")) {
        // "budget sets no limit": every budget input is part of the problem.
        for (QWidget *w : {static_cast<QWidget *>(m_seconds), static_cast<QWidget *>(m_epochs),
                           static_cast<QWidget *>(m_target), static_cast<QWidget *>(m_maxRounds)})
            FieldMarker::mark(w, message);
        return true;
    }
    QWidget *target = m_fields.value(field);
    if (target)
        FieldMarker::mark(target, message);
    return target;
}

void JobEditor::clearMarks()
{
    for (QWidget *w : std::as_const(m_fields))
        FieldMarker::clear(w);
    for (const QList<KnobField> &fields : std::as_const(m_knobFields)) {
        for (const KnobField &f : fields)
            FieldMarker::clear(f.input);
    }
}

} // namespace dlion::ui
