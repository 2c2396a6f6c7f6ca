from gradstep.cli import main

raise SystemExit(main())
