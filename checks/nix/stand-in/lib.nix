# A stand-in for nixpkgs' `lib`, for checking kix's Nix packaging where no
# nixpkgs is available (checks/nix/run). It has the few functions the flake,
# the NixOS module, the image and the checks use, plus a small module system:
#
#   - options are plain data (`mkOption` adds `_type = "option"`); types are
#     data with a `check` function;
#   - definitions may use mkIf / mkMerge / mkOverride (mkDefault, mkForce) /
#     mkOrder at any depth; as in nixpkgs, conditions are pushed down to the
#     options they define, so `config = mkIf cfg.enable {...}` does not recurse;
#   - priorities: option defaults 1500, mkDefault 1000, plain 100, mkForce
#     50; attribute sets merge key by key, lists of the best priority are
#     concatenated, other values must agree;
#   - submodules with `freeformType`; values are type-checked; a definition
#     of an option nobody declared is an error;
#   - `nixosSystem` evaluates modules together with a stub of the NixOS
#     options kix's module touches (declared as `anything`), and a
#     `system.build.toplevel` that throws on failed assertions.
#
# It is a stand-in for checking names, defaults and generated values, not a
# replacement: `nix flake check` with nixpkgs evaluates the real thing.
let
  inherit (builtins)
    all
    any
    attrNames
    concatLists
    concatMap
    concatStringsSep
    elem
    elemAt
    filter
    foldl'
    functionArgs
    genList
    isAttrs
    isBool
    isFunction
    isInt
    isList
    isPath
    isString
    length
    listToAttrs
    mapAttrs
    stringLength
    substring
    ;

  lib = rec {
    # ---- general -----------------------------------------------------------
    inherit
      all
      any
      attrNames
      concatLists
      concatMap
      concatStringsSep
      elem
      filter
      foldl'
      length
      mapAttrs
      ;
    id = x: x;
    head = builtins.head;
    last = xs: elemAt xs (length xs - 1);
    imap0 = f: xs: genList (i: f i (elemAt xs i)) (length xs);
    genAttrs =
      names: f:
      listToAttrs (
        map (name: {
          inherit name;
          value = f name;
        }) names
      );
    attrValues = a: map (n: a.${n}) (attrNames a);
    mapAttrsToList = f: a: map (n: f n a.${n}) (attrNames a);
    filterAttrs =
      pred: a:
      listToAttrs (
        concatMap (
          name:
          if pred name a.${name} then
            [
              {
                inherit name;
                value = a.${name};
              }
            ]
          else
            [ ]
        ) (attrNames a)
      );
    optional = cond: x: if cond then [ x ] else [ ];
    optionals = cond: xs: if cond then xs else [ ];
    optionalString = cond: s: if cond then s else "";
    optionalAttrs = cond: a: if cond then a else { };
    toList = x: if isList x then x else [ x ];
    unique = foldl' (acc: x: if elem x acc then acc else acc ++ [ x ]) [ ];
    concatMapStringsSep = sep: f: xs: concatStringsSep sep (map f xs);
    hasPrefix = prefix: s: substring 0 (stringLength prefix) s == prefix;
    hasSuffix =
      suffix: s:
      let
        n = stringLength s;
        m = stringLength suffix;
      in
      n >= m && substring (n - m) m s == suffix;
    hasInfix =
      infix: s:
      any (i: substring i (stringLength infix) s == infix) (
        genList (i: i) (stringLength s - stringLength infix + 1)
      );
    escapeShellArg = s: "'" + builtins.replaceStrings [ "'" ] [ "'\\''" ] (toString s) + "'";
    escapeShellArgs = xs: concatStringsSep " " (map escapeShellArg xs);
    makeBinPath = ps: concatStringsSep ":" (map (p: "${p}/bin") ps);
    getExe = p: "${p}/bin/${p.meta.mainProgram or p.pname or p.name}";
    getExe' = p: name: "${p}/bin/${name}";
    isDerivation = x: isAttrs x && (x.type or null) == "derivation";
    recursiveUpdate =
      a: b:
      a
      // mapAttrs (
        n: v: if isAttrs v && isAttrs (a.${n} or null) && !isDerivation v then recursiveUpdate a.${n} v else v
      ) b;

    licenses.asl20 = {
      spdxId = "Apache-2.0";
      shortName = "asl20";
    };
    platforms.linux = [
      "x86_64-linux"
      "aarch64-linux"
      "armv7l-linux"
      "i686-linux"
      "riscv64-linux"
    ];

    # lib.fileset, as far as the flake uses it: the source is the root, and
    # the file set is kept for inspection.
    fileset = {
      unions = xs: {
        _type = "fileset";
        members = xs;
      };
      toSource =
        { root, fileset }:
        {
          _type = "fileset-source";
          inherit root fileset;
          outPath = toString root;
        };
      fileFilter = pred: root: {
        _type = "fileset";
        filter = pred;
        inherit root;
      };
    };

    # ---- options and types ---------------------------------------------------
    mkOption = attrs: attrs // { _type = "option"; };
    isOption = x: isAttrs x && (x._type or null) == "option";
    mkEnableOption = name: mkOption {
      type = types.bool;
      default = false;
      example = true;
      description = "Whether to enable ${name}.";
    };
    mkIf = condition: content: {
      _type = "if";
      inherit condition content;
    };
    mkMerge = contents: {
      _type = "merge";
      inherit contents;
    };
    mkOverride = priority: content: {
      _type = "override";
      inherit priority content;
    };
    mkOptionDefault = mkOverride 1500;
    mkDefault = mkOverride 1000;
    mkForce = mkOverride 50;
    mkOrder = priority: content: {
      _type = "order";
      inherit priority content;
    };
    mkBefore = mkOrder 500;
    mkAfter = mkOrder 1500;
    literalExpression = text: {
      _type = "literalExpression";
      inherit text;
    };
    literalMD = text: {
      _type = "literalMD";
      inherit text;
    };

    types =
      let
        mk =
          name: check: extra:
          {
            _type = "type";
            inherit name check;
            kind = "value";
          }
          // extra;
        anything = mk "anything" (_: true) { kind = "anything"; };
      in
      rec {
        inherit anything;
        raw = anything;
        unspecified = anything;
        bool = mk "bool" isBool { };
        str = mk "str" isString { };
        lines = mk "lines" isString { kind = "lines"; };
        int = mk "int" isInt { };
        port = mk "port" (x: isInt x && x >= 0 && x <= 65535) { };
        path = mk "path" (x: isPath x || (isString x && lib.hasPrefix "/" x) || (isAttrs x && x ? outPath)) { };
        package = mk "package" (x: isAttrs x && x ? outPath) { };
        pathInStore = mk "path in store" (x: lib.hasPrefix builtins.storeDir (toString x)) { };
        attrs = mk "attrs" isAttrs { kind = "anything"; };
        nonEmptyStr = mk "non-empty string" (x: isString x && x != "") { };
        strMatching = re: mk "string matching ${re}" (x: isString x && builtins.match re x != null) { };
        ints = {
          positive = mk "positive integer" (x: isInt x && x > 0) { };
          unsigned = mk "unsigned integer" (x: isInt x && x >= 0) { };
          between = lo: hi: mk "integer between ${toString lo} and ${toString hi}" (x: isInt x && x >= lo && x <= hi) { };
        };
        enum = values: mk "one of ${concatStringsSep ", " (map builtins.toJSON values)}" (x: elem x values) {
          inherit values;
        };
        nullOr = t: mk "null or ${t.name}" (x: x == null || t.check x) { nested = t; };
        listOf = t: mk "list of ${t.name}" (x: isList x && all t.check x) {
          kind = "list";
          nested = t;
        };
        attrsOf = t: mk "attribute set of ${t.name}" (x: isAttrs x && all (n: t.check x.${n}) (attrNames x)) {
          kind = "attrs";
          nested = t;
        };
        lazyAttrsOf = attrsOf;
        either = a: b: mk "${a.name} or ${b.name}" (x: a.check x || b.check x) { };
        oneOf = ts: mk (concatStringsSep " or " (map (t: t.name) ts)) (x: any (t: t.check x) ts) { };
        submodule = module: mk "submodule" isAttrs {
          kind = "submodule";
          inherit module;
        };
      };

    # ---- the module system -------------------------------------------------
    evalModules =
      {
        modules,
        specialArgs ? { },
      }:
      let
        args = specialArgs // {
          inherit lib config options;
        };

        showPath = concatStringsSep ".";
        noValue = {
          _type = "noValue";
        };
        isNoValue = v: isAttrs v && (v._type or null) == "noValue";
        wrapperType = v: if isAttrs v then v._type or null else null;

        loadModule =
          parentKey: i: m:
          let
            isFile = isPath m || isString m;
            f = if isFile then import m else m;
            v = if isFunction f then f args else f;
          in
          {
            key = v.key or (if isFile then toString m else "${parentKey}:anon-${toString i}");
            module = v;
          };
        closure = builtins.genericClosure {
          startSet = imap0 (loadModule "<root>") modules;
          operator = item: imap0 (loadModule item.key) (item.module.imports or [ ]);
        };
        mods = map (item: item.module) closure;

        moduleAttrs = [
          "imports"
          "_file"
          "key"
          "meta"
          "disabledModules"
          "_class"
          "freeformType"
        ];
        definitionsOf = m: if m ? config || m ? options then m.config or { } else removeAttrs m moduleAttrs;

        mergeDeclarations =
          a: b:
          a
          // mapAttrs (
            n: v:
            if a ? ${n} && !(isOption v) && !(isOption a.${n}) then
              mergeDeclarations a.${n} v
            else if a ? ${n} then
              throw "stand-in module system: option ${n} declared twice"
            else
              v
          ) b;
        options = foldl' mergeDeclarations { } (map (m: m.options or { }) mods);

        # Definitions not matching any declaration (mkIf conditions are not
        # evaluated for this, as in nixpkgs).
        undeclared =
          path: decls: v:
          let
            t = wrapperType v;
          in
          if t == "if" || t == "override" || t == "order" then
            undeclared path decls v.content
          else if t == "merge" then
            concatMap (undeclared path decls) v.contents
          else if !(isAttrs v) then
            [ (showPath path) ]
          else
            concatMap (
              n:
              if !(decls ? ${n}) then
                [ (showPath (path ++ [ n ])) ]
              else if isOption decls.${n} then
                [ ]
              else
                undeclared (path ++ [ n ]) decls.${n} v.${n}
            ) (attrNames v);

        # A definition: { conds; priority; value }.
        define = value: {
          conds = [ ];
          priority = 100;
          inherit value;
        };
        # Strip the wrappers at the top of a definition.
        expand =
          d:
          let
            v = d.value;
            t = wrapperType v;
          in
          if t == "if" then
            expand (
              d
              // {
                conds = d.conds ++ [ v.condition ];
                value = v.content;
              }
            )
          else if t == "merge" then
            concatMap (c: expand (d // { value = c; })) v.contents
          else if t == "override" then
            expand (
              d
              // {
                inherit (v) priority;
                value = v.content;
              }
            )
          else if t == "order" then
            expand (d // { value = v.content; })
          else
            [ d ];
        # The definitions of attribute `name` inside a definition, without
        # evaluating conditions.
        pushDown =
          name: d:
          concatMap (
            e: if isAttrs e.value && e.value ? ${name} then [ (e // { value = e.value.${name}; }) ] else [ ]
          ) (expand d);
        active = defs: filter (d: all (c: c) d.conds) (concatMap expand defs);

        isPlainAttrs = v: isAttrs v && !(lib.isDerivation v) && !(v ? outPath) && wrapperType v == null;

        mergeValues =
          path: type: defs:
          let
            live = active defs;
            values = map (d: d.value) live;
            best = foldl' (m: d: if d.priority < m then d.priority else m) 99999 live;
            top = filter (d: d.priority == best) live;
            topValues = map (d: d.value) top;
            kind = type.kind or "value";
            # Attribute sets merge key by key; a key whose definitions are
            # all inactive (mkIf false) is left out. Only the conditions at
            # the top of each key are evaluated to decide that.
            asAttrs =
              childType:
              let
                names = lib.unique (concatMap (v: attrNames v) values);
                defsOf = n: concatMap (d: if d.value ? ${n} then [ (d // { value = d.value.${n}; }) ] else [ ]) live;
              in
              listToAttrs (
                concatMap (
                  n:
                  if active (defsOf n) == [ ] then
                    [ ]
                  else
                    [
                      {
                        name = n;
                        value = mergeValues (path ++ [ n ]) childType (defsOf n);
                      }
                    ]
                ) names
              );
          in
          if live == [ ] then
            noValue
          else if kind == "submodule" then
            evalSubmodule path type live
          else if kind == "attrs" || (kind == "anything" && all isPlainAttrs values) then
            asAttrs (type.nested or type)
          else if kind == "list" || (kind == "anything" && all isList topValues) then
            concatLists topValues
          else if kind == "lines" then
            concatStringsSep "\n" topValues
          else if all (v: v == lib.head topValues) topValues then
            lib.head topValues
          else
            throw "stand-in module system: option ${showPath path} has conflicting definitions";

        evalOption =
          path: decl: defs:
          let
            type = decl.type or types.anything;
            kind = type.kind or "value";
            default = {
              conds = [ ];
              priority = 1500;
              value = decl.default;
            };
            # Attribute-set-like defaults merge with the definitions (the
            # loose NixOS stubs rely on it); any other default is used, and
            # evaluated, only when nothing defines the option.
            merged = mergeValues path type (defs ++ lib.optional (decl ? default) default);
            fallback =
              let
                v = mergeValues path type defs;
              in
              if isNoValue v && decl ? default then mergeValues path type [ default ] else v;
            value =
              if kind == "anything" || kind == "attrs" || kind == "submodule" then merged else fallback;
          in
          if isNoValue value then
            throw "stand-in module system: option ${showPath path} is used but not defined"
          else if !(type.check value) then
            throw "stand-in module system: option ${showPath path}: the value is not of type ${type.name}"
          else
            value;

        evalDeclarations =
          path: decls: defs:
          mapAttrs (
            name: decl:
            let
              defs' = concatMap (pushDown name) defs;
            in
            if isOption decl then
              evalOption (path ++ [ name ]) decl defs'
            else
              evalDeclarations (path ++ [ name ]) decl defs'
          ) decls;

        evalSubmodule =
          path: type: defs:
          let
            m0 = type.module;
            m = if isFunction m0 then m0 args else m0;
            decls = m.options or { };
            declared = evalDeclarations path decls defs;
            freeNames = filter (n: !(decls ? ${n})) (lib.unique (concatMap (d: attrNames d.value) defs));
            freeType =
              if m ? freeformType then
                m.freeformType.nested or types.anything
              else
                throw "stand-in module system: ${showPath path} has no option ${lib.head freeNames}";
          in
          declared
          // lib.genAttrs freeNames (
            n:
            let
              v = mergeValues (path ++ [ n ]) freeType (concatMap (pushDown n) defs);
            in
            if freeType.check v then v else throw "stand-in module system: ${showPath (path ++ [ n ])} is not ${freeType.name}"
          );

        definitions = map (m: define (definitionsOf m)) mods;
        unknown = concatMap (m: undeclared [ ] options (definitionsOf m)) mods;
        config =
          if unknown != [ ] then
            throw "stand-in module system: no such options: ${concatStringsSep ", " unknown}"
          else
            evalDeclarations [ ] options definitions;
      in
      {
        inherit config options;
      };

    # The NixOS options kix's module and checks touch, declared loosely.
    nixosStub =
      {
        config,
        pkgs,
        ...
      }:
      let
        loose =
          default:
          mkOption {
            type = types.anything;
            inherit default;
          };
        failed = filter (a: !a.assertion) config.assertions;
      in
      {
        options = {
          assertions = mkOption {
            type = types.listOf types.anything;
            default = [ ];
          };
          warnings = mkOption {
            type = types.listOf types.str;
            default = [ ];
          };
          boot = loose { };
          environment = loose { };
          networking = loose { };
          nix = loose { package = pkgs.nix; };
          nixpkgs = loose { };
          security = loose { };
          systemd = loose { };
          users = loose { };
          virtualisation = loose {
            oci-containers = {
              backend = "podman";
              containers = { };
            };
          };
          services.k3s = loose { enable = false; };
          system = loose {
            stateVersion = "25.11";
            extraDependencies = [ ];
          };
        };
        config.system.build.toplevel =
          if failed != [ ] then
            throw "Failed assertions:\n${concatMapStringsSep "\n" (a: "- ${a.message}") failed}"
          else
            pkgs.runCommand "nixos-system-stand-in" { } "";
      };

    nixosSystem =
      {
        modules,
        system ? "x86_64-linux",
        specialArgs ? { },
        ...
      }:
      let
        pkgs = import ./pkgs.nix { inherit system; };
        utils.escapeSystemdExecArgs = xs: concatStringsSep " " (map escapeShellArg xs);
      in
      evalModules {
        modules = [ nixosStub ] ++ modules;
        specialArgs = {
          inherit pkgs utils;
          modulesPath = "/stand-in/nixos/modules";
        }
        // specialArgs;
      }
      // {
        inherit pkgs;
      };
  };
in
lib
