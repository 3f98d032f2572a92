"""Every setting a receiver reads reaches the version its route and queues invoke.

A function on Lambda Managed Instances runs from published versions behind SAM's alias `live`.
SAM names the version after a hash of the code and of the template's text of the function's
settings, so a parameter's new value leaves the version's logical id as it was
(aws/serverless-application-model#1640 and #3820), and CloudFormation then updates only the
unpublished `$LATEST`. The template therefore gives each such function a VersionDescription
built from the values it resolves; AWS::Lambda::Version's Description "Update requires:
Replacement", so a changed value replaces the version (docs/decisions/0052-...).

This check translates the template with SAM's translator, as `sam deploy` has CloudFormation
do, once with realistic parameter values and once more for each parameter that reaches a
managed receiver's configuration (its properties and the Globals, through any condition), that
one parameter changed. Where the function's configuration (resolved) changes, it fails unless
the alias `live` then names another version: another
logical id, or a Description that resolves to another value (resolved here with the parameter
values, the way CloudFormation resolves it at deploy). A description must also fit the 256
characters Lambda takes, with the values used here.

The migrate function has the same alias, which the custom resource DatabaseMigrations invokes
with its version in FunctionVersion (its rollback guard compares the two), and ~30 settings
that no 256 characters hold. Its description is therefore the digest of those settings, which
the custom resource MigrateSettings carries (rendered from the same text as the function's) and
the function answers with (docs/decisions/0055-...). For each parameter that reaches the
function, the custom resources or the Globals, changed in turn with DatabaseMigrations still
deployed: where the function's configuration (resolved, but for its reserved concurrency,
which is the function's and no version's) changes, DatabaseMigrations' properties must change
(else CloudFormation sends it no Update) and name the version the alias names, a new one (so
the run reads the configuration Lambda publishes from what CloudFormation just gave the
function, the new value); and where the configuration stays, so must the version. The digest
is modelled as the function computes it (cfn::settings_digest).

    python scripts/live_versions.py template.yaml            # the check
    python scripts/live_versions.py --mutant template.yaml   # it fails without the descriptions

Run by scripts/check-template with cfn-lint's Python (its YAML loader, SAM's translator).
"""

import copy
import hashlib
import os
import json
import re
import sys

from template_checks import evaluate

from cfnlint.decode import cfn_yaml

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the partition, as `sam validate --region`
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:claimonce/{}-AbCdEf"
# Realistic values: every receiver deployed on Managed Instances, with an event bus and an API
# key where it takes one, so that every branch a setting can take is on.
BASE = {
    "ManagedInstances": "true",
    "SubnetIds": "subnet-0a,subnet-0b",
    "SecurityGroupIds": "sg-0a",
    "DbProxyEndpoint": "claimonce-proxy.proxy-c1a2b3c4d5e6.us-east-1.rds.amazonaws.com",
    "DbProxyResourceId": "prx-0123456789abcdef0",
}


def values_for(template):
    """The base parameter values: defaults, BASE, and a value for every ARN-like, bus and key
    parameter so that the conditions built on them are true."""
    values = {}
    for name, spec in template["Parameters"].items():
        default = spec.get("Default")
        values[name] = ",".join(default) if isinstance(default, list) else default
        if name.startswith("Deploy") and spec.get("AllowedValues") == ["true", "false"]:
            values[name] = "true"
        elif name.endswith("WebhookSecretArn") or name.endswith("ApiKeySecretArn"):
            values[name] = ARN.format(name[:-3].lower())
        elif name.endswith("EventBusName"):
            values[name] = f"aws.partner/{name[:-12].lower()}.com/acct_1a2b3c/events"
    values.update(BASE)
    return {k: v for k, v in values.items() if v is not None}


def changed(name, spec, value):
    """Another valid value of the parameter."""
    allowed = [str(v) for v in spec.get("AllowedValues", [])]
    if allowed:
        others = [v for v in allowed if v != str(value)]
        return others[0] if others else None
    if spec.get("Type") == "Number":
        number = float(value) + 1
        if "MaxValue" in spec and number > float(spec["MaxValue"]):
            number = float(value) - 1
        return str(int(number)) if number == int(number) else str(number)
    if not value:
        if name.endswith("Arn"):
            return ARN.format(name.lower())
        return "/opt/ca.pem" if name == "PgSslRootCert" else "x"
    if name.endswith("Arn"):
        return value.replace("-AbCdEf", "-ZyXwVu")
    if name == "DbProxyEndpoint":
        return value.replace("proxy-c1a2b3c4d5e6", "proxy-f6e5d4c3b2a1")
    return value[:-1] + ("y" if value[-1] != "y" else "z")


def conditions(template, values):
    """Every condition's value under the parameter values."""
    body = template.get("Conditions", {})
    done = {}

    def cond(name):
        if name not in done:
            done[name] = evaluate(body[name], lambda arg: values.get(arg, arg), cond)
        return done[name]

    for name in body:
        cond(name)
    return done


def resolve(node, values, conds):
    """A property's value as CloudFormation resolves it at deploy; a resource's attribute as a
    placeholder naming it (the same in both translations)."""
    if isinstance(node, list):
        return [resolve(n, values, conds) for n in node]
    if not isinstance(node, dict):
        return node
    if len(node) != 1:
        return {k: resolve(v, values, conds) for k, v in node.items()}
    (key, arg), = node.items()
    if key == "Ref":
        return values.get(arg, f"<{arg}>")
    if key == "Fn::GetAtt":
        return f"<{'.'.join(arg) if isinstance(arg, list) else arg}>"
    if key == "Fn::If":
        return resolve(arg[1] if conds[arg[0]] else arg[2], values, conds)
    if key == "Fn::Join":
        return arg[0].join(str(resolve(p, values, conds)) for p in resolve(arg[1], values, conds))
    if key == "Fn::Select":
        return resolve(arg[1], values, conds)[int(resolve(arg[0], values, conds))]
    if key == "Fn::Split":
        return str(resolve(arg[1], values, conds)).split(arg[0])
    if key == "Fn::Sub":
        text, extra = (arg, {}) if isinstance(arg, str) else arg
        return re.sub(r"\$\{([^}]+)\}", lambda m: str(
            resolve(extra[m.group(1)], values, conds) if m.group(1) in extra
            else values.get(m.group(1), f"<{m.group(1)}>")), text)
    return {key: resolve(arg, values, conds)}


def reaching(template, logical):
    """The parameters that reach a function's configuration: referenced by its properties
    (events aside) or the Globals, directly, in a Sub, or through a condition."""
    params = template["Parameters"]
    body = template["Resources"][logical]
    props = {k: v for k, v in body["Properties"].items() if k != "Events"}
    found, seen = set(), set()

    def walk(node):
        if isinstance(node, list):
            for n in node:
                walk(n)
        elif isinstance(node, dict):
            for key, arg in node.items():
                if key == "Ref" and isinstance(arg, str) and arg in params:
                    found.add(arg)
                elif key in ("Condition",) and isinstance(arg, str):
                    condition(arg)
                elif key == "Fn::If":
                    condition(arg[0])
                    walk(arg[1:])
                elif key == "Fn::Sub":
                    text = arg if isinstance(arg, str) else arg[0]
                    found.update(n for n in re.findall(r"\$\{([^}!.]+)\}", text) if n in params)
                    if not isinstance(arg, str):
                        walk(arg[1])
                else:
                    walk(arg)

    def condition(name):
        if name not in seen:
            seen.add(name)
            walk(template["Conditions"][name])

    walk([props, template.get("Globals", {}).get("Function", {})])
    return sorted(found)


def translate(template, values):
    """The template as SAM's translator renders it with these parameter values."""
    sam = copy.deepcopy(template)
    for body in sam["Resources"].values():
        if body.get("Type") == "AWS::Serverless::Function":
            body["Properties"]["CodeUri"] = "s3://bucket/key"  # sam deploy's upload, stood in for
    return Translator(managed_policy_map=None, sam_parser=Parser(), plugins=[]).translate(
        sam_template=sam, parameter_values=dict(values), get_managed_policy_map=lambda: {})


def live_version(template, logical, values):
    """(the version's logical id, its Description resolved) that `<logical>`'s alias `live`
    names, once SAM has translated the template with these parameter values."""
    out = translate(template, values)
    alias = out["Resources"][f"{logical}Aliaslive"]["Properties"]
    version = alias["FunctionVersion"]["Fn::GetAtt"][0]
    description = out["Resources"][version]["Properties"].get("Description")
    conds = conditions(out, values)
    configuration = resolve(out["Resources"][logical]["Properties"], values, conds)
    return (version, resolve(description, values, conds)), configuration


def findings(template):
    iam = values_for(template)
    # And once with database secrets, the other way a receiver logs in.
    secret = dict(iam, DatabaseAuth="secret", **{
        n: ARN.format(n[:-3].lower()) for n in template["Parameters"] if n.endswith("DbSecretArn")})
    return sum((findings_with(template, values) + migrate_findings(template, values)
                for values in (iam, secret)), [])


MIGRATE, RUN, SETTINGS = "MigrateFunction", "DatabaseMigrations", "Custom::MigrateSettings"


def settings_digest(properties):
    """What the migrate function answers a MigrateSettings request with (cfn::settings_digest):
    the SHA-256 of its properties as JSON, keys sorted, no spaces."""
    text = json.dumps(properties, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "settings sha256:" + hashlib.sha256(text.encode()).hexdigest()


class Deployed:
    """The migrate function's side of one translation, resolved as CloudFormation would: a
    MigrateSettings digest as the function computes it, a version as its physical id (a new one
    when its logical id or its description changes)."""

    def __init__(self, template, values):
        self.out = translate(template, values)
        self.values = values
        self.conds = conditions(self.out, values)
        resources = self.out["Resources"]
        alias = resources[f"{MIGRATE}Aliaslive"]["Properties"]["FunctionVersion"]["Fn::GetAtt"][0]
        self.version = self.resolve({"Ref": alias})
        self.run = self.resolve(resources[RUN]["Properties"]) if RUN in resources else None
        configuration = self.resolve(resources[MIGRATE]["Properties"])
        # The function's, applied to every version (PutFunctionConcurrency), so no version's.
        configuration.pop("ReservedConcurrentExecutions", None)
        self.configuration = configuration
        self.settings = {n: self.resolve(b["Properties"]) for n, b in resources.items()
                         if b.get("Type") == SETTINGS}

    def resolve(self, node):
        resources = self.out["Resources"]

        def bound(node):
            if isinstance(node, list):
                return [bound(n) for n in node]
            if not isinstance(node, dict):
                return node
            if list(node) == ["Fn::GetAtt"]:
                target, attribute = node["Fn::GetAtt"]
                if resources.get(target, {}).get("Type") == SETTINGS and attribute == "Digest":
                    return settings_digest(self.resolve(resources[target]["Properties"]))
            if list(node) == ["Ref"] and resources.get(node["Ref"], {}).get("Type") == "AWS::Lambda::Version":
                description = self.resolve(resources[node["Ref"]]["Properties"].get("Description"))
                return f"<version {node['Ref']} described {description!r}>"
            return {k: bound(v) for k, v in node.items()}

        return resolve(bound(node), self.values, self.conds)


def migrate_findings(template, values):
    """Every setting of the migrate function reaches the version DatabaseMigrations runs."""
    resources = template["Resources"]
    if MIGRATE not in resources or RUN not in resources:
        return []
    bad = []
    base = Deployed(template, values)
    if base.run is None:
        return [f"{RUN}: not deployed with the values checked ({values.get('MigrateOnDeploy')!r})"]
    description = base.version
    for logical, settings in base.settings.items():
        variables = base.configuration.get("Environment", {}).get("Variables", {})
        carried = settings.get("Environment", {}).get("Variables", {})
        for name in sorted(set(variables) | set(carried)):
            if variables.get(name) != carried.get(name):
                bad.append(f"{logical}: {name} is {carried.get(name)!r}, {MIGRATE}'s is "
                           f"{variables.get(name)!r}")
        if len(settings_digest(settings)) > 256:
            bad.append(f"{logical}: the digest is over the 256 characters of a version's description")
    names = set(reaching(template, MIGRATE))
    for logical, body in resources.items():
        if logical == RUN or body.get("Type") == SETTINGS:
            names.update(reaching(template, logical))
    tried, configured = 0, 0
    for name in sorted(names):
        other = changed(name, template["Parameters"][name], values[name])
        if other is None:
            continue
        variant = dict(values, **{name: other})
        if not conditions(template, variant).get(resources[RUN].get("Condition"), True):
            continue  # a change that removes the migrations resource runs nothing
        tried += 1
        now = Deployed(template, variant)
        change = f"{MIGRATE}: {name} {values[name]!r} -> {other!r}"
        if now.configuration != base.configuration:
            configured += 1
            if now.run == base.run:
                bad.append(f"{change} changes its configuration and leaves {RUN}'s properties as "
                           "they were: CloudFormation sends it no Update, and no migration runs "
                           "with the new value")
            if now.version == base.version:
                bad.append(f"{change} changes its configuration and leaves the alias live on the "
                           "same version, which reads the value before")
        elif now.version != base.version or now.run != base.run:
            # Lambda publishes no version of a configuration it has published already.
            bad.append(f"{change} changes the version or {RUN} but not the function's configuration")
        if now.run.get("FunctionVersion") != now.version:
            bad.append(f"{change}: {RUN} names {now.run.get('FunctionVersion')} and the alias "
                       f"{now.version}: the run would skip as a rollback's")
    print(f"  {MIGRATE} (DatabaseAuth={values['DatabaseAuth']}): {tried} parameters reach it, each "
          f"changed in turn, {configured} changing its configuration; its live version: {description}")
    return bad


def findings_with(template, values):
    managed = [n for n, b in template["Resources"].items()
               if b.get("Type") == "AWS::Serverless::Function"
               and "CapacityProviderConfig" in b.get("Properties", {})]
    bad = []
    if not managed:
        bad.append("no function on Lambda Managed Instances to check")
    for logical in managed:
        base, configuration = live_version(template, logical, values)
        if isinstance(base[1], str) and len(base[1]) > 256:
            bad.append(f"{logical}: its version's description is {len(base[1])} characters, "
                       "over the 256 Lambda takes")
        tried = 0
        for name in reaching(template, logical):
            other = changed(name, template["Parameters"][name], values[name])
            if other is None:
                continue
            variant = dict(values, **{name: other})
            # A change that removes the function is no setting of it.
            if not conditions(template, variant).get(template["Resources"][logical].get("Condition"), True):
                continue
            tried += 1
            version, other_configuration = live_version(template, logical, variant)
            if other_configuration != configuration and version == base:
                bad.append(f"{logical}: {name} {values[name]!r} -> {other!r} changes its "
                           f"configuration and leaves the alias live on the same version ({base[0]})")
            # Lambda publishes no version of a configuration it has published already
            # (PublishVersion), so a new description alone would name the version before.
            if other_configuration == configuration and version[1] != base[1]:
                bad.append(f"{logical}: {name} {values[name]!r} -> {other!r} changes the "
                           "version's description but not the function's configuration")
        print(f"  {logical} (DatabaseAuth={values['DatabaseAuth']}): {tried} parameters reach it, each changed in turn; "
              f"its live version's description: {base[1]!r}")
    return bad


def main(argv):
    mutant = argv[:1] == ["--mutant"]
    template = cfn_yaml.load(argv[-1])
    template = json.loads(json.dumps(template))
    if mutant:
        for body in template["Resources"].values():
            body.get("Properties", {}).pop("VersionDescription", None)
        # The migrate function's too; its own findings must be among those found.
    bad = findings(template)
    if mutant:
        if not bad:
            sys.exit("without VersionDescription the check found nothing: it cannot fail")
        migrate = [b for b in bad if b.startswith(MIGRATE)]
        if MIGRATE in template["Resources"] and not migrate:
            sys.exit(f"without {MIGRATE}'s VersionDescription the check found nothing of it")
        print(f"  mutant (no VersionDescription): {len(bad)} finding(s), e.g. {bad[0]}")
        if migrate:
            print(f"  ({len(migrate)} of {MIGRATE}, e.g. {migrate[0]})")
        return
    if bad:
        sys.exit("\n".join(bad))


if __name__ == "__main__":
    main(sys.argv[1:])
