"""Which commercial regions the templates deploy in, as cfn-lint's per-region resource
specifications tell (those its rule E3006 reads: a resource type the region lacks), and that
DEPLOY.md names the others ("**Regions.**").

cfn-lint checks a SAM template as written, so AWS::Serverless::CapacityProvider escapes its
region check; template.yaml is checked here as SAM's translator renders it (the
AWS::Lambda::CapacityProvider CloudFormation receives), the quick start's own resources as
written, each with every resource whatever its condition.
CloudFormation refuses a template naming a type its
region lacks whatever the conditions, so a region that lacks one is one the template does not
deploy in, with ManagedInstances=false too.

    python scripts/regions.py template.yaml quickstart.yaml DEPLOY.md
"""
import json
import os
import re
import sys

import cfnlint
from cfnlint.decode import cfn_yaml
from cfnlint.schema.manager import PROVIDER_SCHEMA_MANAGER
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the partition, as `sam validate --region`
NOT_COMMERCIAL = ("cn-", "us-gov-", "us-iso", "eu-iso", "eusc-")


def commercial_regions():
    folder = os.path.join(os.path.dirname(cfnlint.__file__), "data", "schemas", "providers")
    return sorted(f[:-5] for f in os.listdir(folder)
                  if f.endswith(".json") and f != "sam.json" and not f.startswith(NOT_COMMERCIAL))


def translated(path):
    template = json.loads(json.dumps(cfn_yaml.load(path)))
    for body in template["Resources"].values():
        if body.get("Type") == "AWS::Serverless::Function":
            body["Properties"]["CodeUri"] = "s3://bucket/key"  # sam deploy's upload, stood in for
    return Translator(managed_policy_map=None, sam_parser=Parser(), plugins=[]).translate(
        sam_template=template, parameter_values={}, get_managed_policy_map=lambda: {})


def lacking(template, regions):
    """{region: [resource types of `template` it lacks]}, from the per-region specifications
    cfn-lint's E3006 reads; SAM's own types are the translator's to render."""
    types = {b.get("Type") for b in template.get("Resources", {}).values()}
    types = {t for t in types if isinstance(t, str) and not t.startswith(("AWS::Serverless::", "Custom::"))}
    found = {}
    for region in regions:
        known = PROVIDER_SCHEMA_MANAGER.get_resource_types(region=region)
        missing = sorted(t for t in types if t not in known)
        if missing:
            found[region] = missing
    return found


def stated(deploy):
    """The regions DEPLOY.md's "**Regions.**" paragraph names: template.yaml's, then those the
    quick start adds (after "quick start")."""
    paragraph = re.search(r"\*\*Regions\.\*\*(.*?)(\n\n|$)", deploy, re.S)
    if not paragraph:
        return None, None
    text = paragraph.group(1)
    main, _, quick = text.partition("quick start")
    codes = lambda s: set(re.findall(r"`([a-z]{2}-[a-z]+-\d)`", s))
    return codes(main), codes(quick)


def main(argv):
    main_path, quick_path, deploy_path = argv
    regions = commercial_regions()
    main_lacks = lacking(translated(main_path), regions)
    quick_lacks = lacking(cfn_yaml.load(quick_path), regions)
    for region in regions:
        why = sorted(set(main_lacks.get(region, [])) | set(quick_lacks.get(region, [])))
        if why:
            print(f"  {region}: lacks {', '.join(why)}")
    print(f"  {len(regions)} commercial regions checked; template.yaml deploys in "
          f"{len(regions) - len(main_lacks)}, the quick start in "
          f"{len(regions) - len(set(main_lacks) | set(quick_lacks))}", flush=True)
    said_main, said_quick = stated(open(deploy_path).read())
    bad = []
    if said_main is None:
        bad.append("DEPLOY.md has no **Regions.** paragraph naming the regions the templates do not deploy in")
    else:
        if said_main != set(main_lacks):
            bad.append(f"DEPLOY.md says template.yaml does not deploy in {sorted(said_main)}; "
                       f"cfn-lint finds {sorted(main_lacks)}")
        if said_quick != set(quick_lacks) - set(main_lacks):
            bad.append(f"DEPLOY.md says the quick start also does not deploy in {sorted(said_quick)}; "
                       f"cfn-lint finds {sorted(set(quick_lacks) - set(main_lacks))}")
    if bad:
        sys.exit("\n".join(bad))


if __name__ == "__main__":
    main(sys.argv[1:])
